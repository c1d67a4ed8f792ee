package limiter

// RecordN exposes recordN (exact counts, no sampling) to the external
// tests, which need exact counts to check the ranking.
func (t *TopK) RecordN(k Key, requests, refused uint64) { t.recordN(k, requests, refused) }
