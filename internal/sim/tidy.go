package sim

import (
	"time"

	"github.com/s3task/s3task"
)

// tidier purges, until the turbulence ends, every finished task as soon as
// Purge allows it: a Purge of everything created until now, every 1 to 4
// seconds (Config.Tidy). It is the operator who runs Purge from a tight
// cron job, against the outputs whose writes land late.
func (w *World) tidier(p *proc, until time.Time) {
	for {
		d := p.rng.Dur(time.Second, 4*time.Second)
		if !time.Now().Add(d).Before(until) {
			return
		}
		if !w.sleep(d) {
			return
		}
		p.purge(time.Now(), s3task.PurgeOptions{DropPendingNotices: p.rng.Chance(0.5)})
	}
}
