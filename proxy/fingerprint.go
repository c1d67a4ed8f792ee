package proxy

import (
	"crypto/sha256"
	"encoding/binary"
	"hash"
	"mime"
	"strings"
	"sync"

	"github.com/idemgate/idemgate/internal/canonjson"
	"github.com/idemgate/idemgate/keystore"
)

// fingerprintState holds the reusable buffers of one fingerprint.
type fingerprintState struct {
	h     hash.Hash
	head  []byte
	canon []byte
}

var fingerprintPool = sync.Pool{New: func() any {
	return &fingerprintState{h: sha256.New(), head: make([]byte, 0, 256), canon: make([]byte, 0, 4096)}
}}

// fingerprint returns the SHA-256 of what makes two requests the same
// (DESIGN.md, Fingerprint): route name, method, the escaped path as sent,
// the raw query and the body — canonical JSON (without the ignore pointers)
// when contentType is JSON and the body parses, else the raw bytes. Each
// part is length-prefixed, so no two different requests share an encoding.
func fingerprint(routeName, method, escapedPath, rawQuery, contentType string, body []byte, ignore []canonjson.Pointer) keystore.Fingerprint {
	st := fingerprintPool.Get().(*fingerprintState)
	defer fingerprintPool.Put(st)
	h := st.h
	h.Reset()
	// The head parts go through one buffer and one Write: a Write per part
	// on the hash.Hash interface allocates.
	head := st.head[:0]
	for _, s := range [...]string{routeName, method, escapedPath, rawQuery} {
		head = binary.BigEndian.AppendUint64(head, uint64(len(s)))
		head = append(head, s...)
	}
	payload := body
	if isJSON(contentType) {
		if c, ok := canonjson.Append(st.canon[:0], body, ignore); ok {
			payload = c
			if cap(c) <= 1<<20 {
				st.canon = c[:0]
			}
		}
	}
	head = binary.BigEndian.AppendUint64(head, uint64(len(payload)))
	h.Write(head)
	h.Write(payload)
	if cap(head) <= 64<<10 {
		st.head = head[:0]
	}
	var fp keystore.Fingerprint
	h.Sum(fp[:0])
	return fp
}

// isJSON reports whether a Content-Type is application/json or *+json.
func isJSON(contentType string) bool {
	if contentType == "" {
		return false
	}
	if contentType == "application/json" {
		return true
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	return mt == "application/json" || (strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"))
}
