package api

import (
	"errors"
	"net/http"
	"strings"

	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/preset"
)

// FieldError names one invalid value of a request, an entry of a problem's errors
// (docs/errors-and-idempotency.md). Pointer is a JSON Pointer (RFC 6901) into the request body,
// "/tools/allow/2"; a query parameter is "#/query/<name>" and a header "#/header/<name>" (a
// body pointer always starts with "/", so the forms cannot be confused). Detail says what is
// wrong with the value.
type FieldError struct {
	Pointer string `json:"pointer"`
	Detail  string `json:"detail"`
}

// queryPointer and headerPointer are the pointers of a query parameter and of a header.
func queryPointer(name string) string  { return "#/query/" + name }
func headerPointer(name string) string { return "#/header/" + name }

// bodyPointer is the JSON Pointer of a dotted path of JSON names ("model.maxTokens").
func bodyPointer(path string) string {
	return preset.FieldPointer(path)
}

// fieldsError is an application error (its code and detail, the summary) that names the values
// at fault.
type fieldsError struct {
	fault  *fault.Error
	fields []FieldError
}

func (e *fieldsError) Error() string { return e.fault.Error() }
func (e *fieldsError) Unwrap() error { return e.fault }

// fieldError is an invalid_request error about the one value at pointer; detail is both the
// summary and the field's detail.
func fieldError(pointer, detail string) error {
	return fieldErrorCode(CodeInvalidRequest, pointer, detail)
}

// fieldErrorCode is fieldError with another code (a 400 of its own, webhook_url_not_allowed).
func fieldErrorCode(code, pointer, detail string) error {
	return &fieldsError{fault: errorf(code, detail), fields: []FieldError{{Pointer: pointer, Detail: detail}}}
}

// pointTo names the field of a 400 error from a validator that does not (pkg/tenant's,
// pkg/approval's): the first of fields its message starts with (followed by a space or a colon)
// is the field at fault. An entry "prefix=/pointer" names the pointer of a message prefix that
// is not the field's JSON name ("tenant name=/name"). Any other error is returned as it is.
func pointTo(err error, fields ...string) error {
	if err == nil || len(fieldErrors(err)) > 0 {
		return err
	}
	var fe *fault.Error
	if !errors.As(err, &fe) || fe.Message == "" {
		return err
	}
	if entry, ok := problemTable[fe.Code]; !ok || entry.status != http.StatusBadRequest {
		return err
	}
	for _, f := range fields {
		prefix, pointer, named := strings.Cut(f, "=")
		if !named {
			pointer = bodyPointer(f)
		}
		if rest, ok := strings.CutPrefix(fe.Message, prefix); ok && (strings.HasPrefix(rest, " ") || strings.HasPrefix(rest, ":")) {
			return &fieldsError{fault: fe, fields: []FieldError{{Pointer: pointer, Detail: fe.Message}}}
		}
	}
	return err
}

// fieldErrors are the values err names: a preset's validation problems (every one), or those of
// a fieldsError; nil when err names none.
func fieldErrors(err error) []FieldError {
	var fe *fieldsError
	if errors.As(err, &fe) {
		return fe.fields
	}
	var ve *preset.ValidationError
	if errors.As(err, &ve) {
		out := make([]FieldError, len(ve.Problems))
		for i, p := range ve.Problems {
			out[i] = FieldError{Pointer: p.Pointer(), Detail: p.Message}
		}
		return out
	}
	return nil
}

// joinFields is the one error of a body's checks: nil when every check passed, the error of the
// only one that failed, or, for several, the code of the first with their details joined as the
// summary and the fields of them all.
func joinFields(errs ...error) error {
	var failed []error
	for _, err := range errs {
		if err != nil {
			failed = append(failed, err)
		}
	}
	switch len(failed) {
	case 0:
		return nil
	case 1:
		return failed[0]
	}
	details := make([]string, len(failed))
	var fields []FieldError
	for i, err := range failed {
		details[i] = fault.Message(err)
		fields = append(fields, fieldErrors(err)...)
	}
	return &fieldsError{fault: errorf(fault.Code(failed[0]), strings.Join(details, "; ")), fields: fields}
}
