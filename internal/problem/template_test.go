package problem

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// Every code of the error table goes through a custom template: renamed
// when the spec says so, with its status and Retry-After unchanged.
func TestCustomRendersEveryCode(t *testing.T) {
	tm, err := Compile(Spec{
		Codes:       map[string]string{"idempotency_key_invalid": "invalid_request", "rate_limited": "too_many_requests"},
		ContentType: "application/vnd.shop+json",
		Body:        `{"error":{"code":{{json .Code}},"status":{{.Status}},"title":{{json .Title}},"message":{{json .Detail}},"request_id":{{json .RequestID}}}}`,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, code := range Codes {
		t.Run(code, func(t *testing.T) {
			want := map[string]string{"idempotency_key_invalid": "invalid_request", "rate_limited": "too_many_requests"}[code]
			if want == "" {
				want = code
			}
			p := Problem{Status: 409, Code: code, Title: "T \"q\"", Detail: "d <x>\n", RetryAfter: "2"}
			rec := httptest.NewRecorder()
			Write(rec, httptest.NewRequest("POST", "/", nil), Custom{T: tm}, p, "rid-1")
			if rec.Code != 409 || rec.Header().Get("Retry-After") != "2" || rec.Header().Get("Content-Type") != "application/vnd.shop+json" {
				t.Fatalf("answer %d %v", rec.Code, rec.Header())
			}
			var b struct {
				Error struct {
					Code, Title, Message string
					Status               int
					RequestID            string `json:"request_id"`
				}
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &b); err != nil {
				t.Fatalf("body %s: %v", rec.Body, err)
			}
			if b.Error.Code != want || b.Error.Status != 409 || b.Error.Title != p.Title || b.Error.Message != p.Detail || b.Error.RequestID != "rid-1" {
				t.Errorf("body %s, want code %s", rec.Body, want)
			}
		})
	}
}

func TestCompileRefusesBrokenTemplates(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spec  Spec
		field string
	}{
		{"parse", Spec{Body: `{"code":{{json .Code}`}, "body"},
		{"unknown field", Spec{Body: `{"code":{{json .Nope}}}`}, "body"},
		{"not JSON", Spec{Body: `{"code":{{.Code}}}`}, "body"},
		{"bad content type", Spec{ContentType: "json;;", Body: `{}`}, "content_type"},
		{"text without body", Spec{ContentType: "text/plain"}, "content_type"},
		{"extensions not an object", Spec{Extensions: `["CONFLICT"]`}, "extensions"},
		{"empty rename", Spec{Codes: map[string]string{"rate_limited": ""}}, "codes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Compile(tc.spec)
			if err == nil || !strings.HasPrefix(err.Error(), tc.field+":") {
				t.Errorf("Compile = %v, want an error about %s", err, tc.field)
			}
		})
	}
	if _, err := Compile(Spec{ContentType: "text/plain", Body: `{{.Code}}: {{.Detail}}`}); err != nil {
		t.Errorf("a text body = %v", err)
	}
}

// A template that fails at run time answers problem+json, counted and
// reported; the status and headers stay.
func TestCustomFallsBackToProblemJSON(t *testing.T) {
	tm, err := Compile(Spec{Body: `{{if eq .Code "idempotency_in_progress"}}{"ok":1}{{else}}{{.Code}}{{end}}`})
	if err != nil {
		t.Fatal(err)
	}
	var reported error
	rec := httptest.NewRecorder()
	Write(rec, httptest.NewRequest("POST", "/", nil), Custom{T: tm, OnError: func(err error) { reported = err }},
		Problem{Status: 503, Code: "overloaded", RetryAfter: "1"}, "r")
	if rec.Code != 503 || rec.Header().Get("Retry-After") != "1" || rec.Header().Get("Content-Type") != "application/problem+json" {
		t.Errorf("answer %d %v", rec.Code, rec.Header())
	}
	if !json.Valid(rec.Body.Bytes()) || !errors.Is(reported, ErrTemplate) || tm.Failures() != 1 {
		t.Errorf("body %s, reported %v, failures %d", rec.Body, reported, tm.Failures())
	}
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatal(rec.Code)
	}
}
