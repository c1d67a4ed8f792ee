package openapi

import (
	"fmt"
	"strings"
)

// UnifiedDiff is the unified diff (3 lines of context) from a to b, or nil
// when they are equal.
func UnifiedDiff(aName, bName string, a, b []byte) []byte {
	x, y := splitLines(a), splitLines(b)
	ops := lineDiff(x, y)
	var out strings.Builder
	const ctx = 3
	for i := 0; i < len(ops); {
		if ops[i].kind == ' ' {
			i++
			continue
		}
		// A hunk: from ctx lines before this change to ctx lines after the
		// last change closer than 2*ctx to the previous one.
		start := max(i-ctx, 0)
		end := i
		for end < len(ops) {
			if ops[end].kind != ' ' {
				end++
				continue
			}
			run := end
			for run < len(ops) && ops[run].kind == ' ' {
				run++
			}
			if run == len(ops) || run-end > 2*ctx {
				end = min(end+ctx, len(ops))
				break
			}
			end = run
		}
		if out.Len() == 0 {
			fmt.Fprintf(&out, "--- %s\n+++ %s\n", aName, bName)
		}
		ai, bi, an, bn := ops[start].a, ops[start].b, 0, 0
		for _, o := range ops[start:end] {
			if o.kind != '+' {
				an++
			}
			if o.kind != '-' {
				bn++
			}
		}
		fmt.Fprintf(&out, "@@ -%s +%s @@\n", hunkRange(ai, an), hunkRange(bi, bn))
		for _, o := range ops[start:end] {
			out.WriteByte(o.kind)
			out.WriteString(o.text)
			if !strings.HasSuffix(o.text, "\n") {
				out.WriteString("\n\\ No newline at end of file\n")
			}
		}
		i = end
	}
	if out.Len() == 0 {
		return nil
	}
	return []byte(out.String())
}

func hunkRange(start, n int) string {
	if n == 0 {
		return fmt.Sprintf("%d,0", start)
	}
	if n == 1 {
		return fmt.Sprint(start + 1)
	}
	return fmt.Sprintf("%d,%d", start+1, n)
}

type diffOp struct {
	kind byte // ' ', '-', '+'
	text string
	a, b int // 0-based line numbers in a and b where this op stands
}

// lineDiff is a longest-common-subsequence line diff. The common prefix and
// suffix are cut first, so a merge's few changed routes cost little; a
// middle over 16M cells is diffed as all removed, all added.
func lineDiff(x, y []string) []diffOp {
	var ops []diffOp
	p := 0
	for p < len(x) && p < len(y) && x[p] == y[p] {
		ops = append(ops, diffOp{' ', x[p], p, p})
		p++
	}
	s := 0
	for s < len(x)-p && s < len(y)-p && x[len(x)-1-s] == y[len(y)-1-s] {
		s++
	}
	mx, my := x[p:len(x)-s], y[p:len(y)-s]
	if len(mx)*len(my) > 16<<20 {
		for i, l := range mx {
			ops = append(ops, diffOp{'-', l, p + i, p})
		}
		for j, l := range my {
			ops = append(ops, diffOp{'+', l, p + len(mx), p + j})
		}
	} else {
		// lcs[i][j] is the LCS length of mx[i:] and my[j:].
		w := len(my) + 1
		lcs := make([]int32, (len(mx)+1)*w)
		for i := len(mx) - 1; i >= 0; i-- {
			for j := len(my) - 1; j >= 0; j-- {
				if mx[i] == my[j] {
					lcs[i*w+j] = lcs[(i+1)*w+j+1] + 1
				} else {
					lcs[i*w+j] = max(lcs[(i+1)*w+j], lcs[i*w+j+1])
				}
			}
		}
		i, j := 0, 0
		for i < len(mx) || j < len(my) {
			switch {
			case i < len(mx) && j < len(my) && mx[i] == my[j]:
				ops = append(ops, diffOp{' ', mx[i], p + i, p + j})
				i, j = i+1, j+1
			case i < len(mx) && (j == len(my) || lcs[(i+1)*w+j] >= lcs[i*w+j+1]):
				ops = append(ops, diffOp{'-', mx[i], p + i, p + j})
				i++
			default:
				ops = append(ops, diffOp{'+', my[j], p + i, p + j})
				j++
			}
		}
	}
	for k := 0; k < s; k++ {
		ops = append(ops, diffOp{' ', x[len(x)-s+k], len(x) - s + k, len(y) - s + k})
	}
	return ops
}
