package framework

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
)

// AuditLogSize returns the size in bytes of the audit log at path, an offset for ReadAuditEventsRange: take
// one at the start and one at the end of a measurement window.
func AuditLogSize(path string) (int64, error) {
	st, err := os.Stat(path)
	if err != nil {
		return 0, fmt.Errorf("audit log size: %w", err)
	}
	return st.Size(), nil
}

// ReadAuditEventsRange parses the events of the audit log at path written between byte offsets from and to
// (see AuditLogSize). The API server's log backend writes one event per write(2), so offsets taken between
// events fall on line boundaries; a partial line at either end is dropped all the same.
func ReadAuditEventsRange(path string, from, to int64) ([]AuditEvent, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read audit log: %w", err)
	}
	defer f.Close()
	start := from
	if from > 0 {
		start = from - 1 // to see whether from starts a line
	}
	buf := make([]byte, to-start)
	if _, err := f.ReadAt(buf, start); err != nil && err != io.EOF {
		return nil, fmt.Errorf("read audit log %s: %w", path, err)
	}
	if from > 0 {
		if buf[0] == '\n' {
			buf = buf[1:]
		} else if i := bytes.IndexByte(buf, '\n'); i >= 0 {
			buf = buf[i+1:]
		} else {
			buf = nil
		}
	}
	var events []AuditEvent
	for len(buf) > 0 {
		i := bytes.IndexByte(buf, '\n')
		if i < 0 {
			break // partial last line
		}
		var e AuditEvent
		if err := json.Unmarshal(buf[:i], &e); err != nil {
			return nil, fmt.Errorf("parse audit log %s: %w", path, err)
		}
		events = append(events, e)
		buf = buf[i+1:]
	}
	return events, nil
}
