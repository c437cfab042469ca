package systemlogmonitor

import (
	"regexp"
	"slices"
	"strings"

	logtypes "k8s.io/node-problem-detector/pkg/systemlogmonitor/types"
)

// logBuffer keeps the last max lines and matches a pattern against their end: NPD's logBuffer
// (pkg/systemlogmonitor/log_buffer.go), with the patterns compiled once (by compilePattern)
// instead of at every match. Not safe for concurrent use.
type logBuffer struct {
	buffer  []*logtypes.Log // ring
	msg     []string
	max     int
	current int
}

func newLogBuffer(maxLines int) *logBuffer {
	return &logBuffer{buffer: make([]*logtypes.Log, maxLines), msg: make([]string, maxLines), max: maxLines}
}

// push adds a line. Mirrors logBuffer.Push.
func (b *logBuffer) push(log *logtypes.Log) {
	b.buffer[b.current%b.max] = log
	b.msg[b.current%b.max] = log.Message
	b.current++
}

// match matches reg (anchored with \z) against the buffered messages joined by newlines, oldest
// first, and returns the lines the match spans, oldest first, or nil. Mirrors logBuffer.Match.
func (b *logBuffer) match(reg *regexp.Regexp) []*logtypes.Log {
	log := b.String()
	loc := reg.FindStringIndex(log)
	if loc == nil {
		return nil
	}
	s := len(log) - loc[0] - 1 // reverse index of the match's start
	total := 0
	var matched []*logtypes.Log
	for i := b.tail(); i >= b.current && b.buffer[i%b.max] != nil; i-- {
		matched = append(matched, b.buffer[i%b.max])
		total += len(b.msg[i%b.max]) + 1 // and its '\n'
		if total > s {
			break
		}
	}
	slices.Reverse(matched)
	return matched
}

// String joins the buffered messages, oldest first (empty slots included, as NPD).
func (b *logBuffer) String() string {
	head := b.current % b.max
	lines := make([]string, 0, b.max)
	lines = append(lines, b.msg[head:]...)
	lines = append(lines, b.msg[:head]...)
	return strings.Join(lines, "\n")
}

func (b *logBuffer) tail() int { return b.current + b.max - 1 }
