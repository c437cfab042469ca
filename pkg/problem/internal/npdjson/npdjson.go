// Package npdjson decodes node-problem-detector's JSON monitor configs and words their errors the
// same way for every kind of monitor: one line naming the file, the field and the value.
package npdjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nodeagent/nodeagent/pkg/config"
)

// FieldError is a problem with one field of a monitor config file.
type FieldError struct {
	// Kind is the monitor kind, e.g. "custom-plugin-monitor" (NPD's problem daemon name).
	Kind string
	// File is the config file's path as given.
	File string
	// Field is the JSON path of the field, e.g. "rules[2].pattern"; empty for the whole file.
	Field string
	// Value is the offending value as written (quoted in the message); empty when there is none.
	Value string
	// Reason says what is wrong.
	Reason string
}

func (e *FieldError) Error() string {
	msg := fmt.Sprintf("%s config %s", e.Kind, e.File)
	switch {
	case e.Field != "" && e.Value != "":
		msg += fmt.Sprintf(": %s %q", e.Field, e.Value)
	case e.Field != "":
		msg += ": " + e.Field
	case e.Value != "":
		msg += fmt.Sprintf(": %q", e.Value)
	}
	return msg + ": " + e.Reason
}

// ReadFile reads path and decodes it into v as NPD does (encoding/json, unknown fields ignored).
// A syntax error names its line and column; a type error names the field and the JSON value.
func ReadFile(kind, path string, v any) error {
	data, err := config.ReadFileLimited(path, config.MaxFileSize)
	if err != nil {
		return &FieldError{Kind: kind, File: path, Reason: err.Error()}
	}
	return Decode(kind, path, data, v)
}

// Decode decodes data, read from path, into v; see ReadFile.
func Decode(kind, path string, data []byte, v any) error {
	err := json.Unmarshal(data, v)
	if err == nil {
		return nil
	}
	var syn *json.SyntaxError
	if errors.As(err, &syn) {
		line, col := position(data, max(syn.Offset-1, 0)) // Offset is just past the bad byte
		return &FieldError{Kind: kind, File: path, Reason: fmt.Sprintf("invalid JSON at line %d, column %d: %v", line, col, syn)}
	}
	var typ *json.UnmarshalTypeError
	if errors.As(err, &typ) {
		field := typ.Field
		if field == "" {
			field = "(top level)"
		}
		return &FieldError{Kind: kind, File: path, Field: field, Value: snippet(data, typ.Offset),
			Reason: fmt.Sprintf("cannot decode JSON %s into %s", typ.Value, typ.Type)}
	}
	return &FieldError{Kind: kind, File: path, Reason: err.Error()}
}

// position turns a byte offset into a 1-based line and column.
func position(data []byte, offset int64) (line, col int) {
	if offset > int64(len(data)) {
		offset = int64(len(data))
	}
	before := data[:offset]
	line = bytes.Count(before, []byte("\n")) + 1
	col = int(offset) - bytes.LastIndexByte(before, '\n')
	return line, col
}

// snippet returns the JSON value that ends at offset (the decoder reports the offset after it),
// cut to 40 bytes.
func snippet(data []byte, offset int64) string {
	if offset <= 0 || offset > int64(len(data)) {
		return ""
	}
	end := int(offset)
	start := end - 1
	for start > 0 && !bytes.ContainsAny(data[start-1:start], ":[,") {
		start--
	}
	s := string(bytes.TrimSpace(data[start:end]))
	if len(s) > 40 {
		s = s[:40] + "..."
	}
	return s
}
