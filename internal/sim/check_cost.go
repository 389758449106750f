package sim

import (
	"fmt"
	"strings"
)

// checkGoneReads: a worker stops reading a record that was deleted. The
// first of its loops to find the record gone tells the others, so each
// loop (poll, notifier, reconciler) reads it at most once, and only when
// their reads were under way together do all three.
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
