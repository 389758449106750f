package sim

import (
	"fmt"
	"strings"
)

// checkGoneReads: a worker stops reading a record that was deleted: it
// may meet a deleted task once through a stale marker and once more
// through a notice it held, and no more.
func checkGoneReads(x *index) []Violation {
	var vs []Violation
	for _, k := range sortedKeys(x.h.GoneReads) {
		n := x.h.GoneReads[k]
		id, proc, _ := strings.Cut(k, " ")
		if n <= x.p.GoneReads || x.workers[proc].Name == "" {
			continue
		}
		vs = append(vs, Violation{Kind: KindCost, Task: id, Time: x.h.End, Msg: fmt.Sprintf(
			"%s read the deleted record of task %s %d times, more than %d", proc, id, n, x.p.GoneReads)})
	}
	return vs
}
