// Package errtree walks the tree of errors that errors.Join (or
// fmt.Errorf with several %w verbs) builds.
package errtree

import "iter"

// Leaves yields, depth first and in order, the errors of err's tree that
// join no others: err itself when it joins none. It looks only through
// Unwrap() []error, not through single wrappers. A nil err yields nothing.
func Leaves(err error) iter.Seq[error] {
	return func(yield func(error) bool) {
		walk(err, yield)
	}
}

func walk(err error, yield func(error) bool) bool {
	if err == nil {
		return true
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			if !walk(e, yield) {
				return false
			}
		}
		return true
	}
	return yield(err)
}
