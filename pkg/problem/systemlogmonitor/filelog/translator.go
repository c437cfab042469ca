package filelog

import (
	"fmt"
	"regexp"
	"time"

	logtypes "k8s.io/node-problem-detector/pkg/systemlogmonitor/types"
)

// The keys of a filelog source's pluginConfig (NPD's filelog translator).
const (
	KeyTimestamp       = "timestamp"
	KeyMessage         = "message"
	KeyTimestampFormat = "timestampFormat"
)

// ConfigError is a bad or missing pluginConfig key.
type ConfigError struct {
	Key, Value, Reason string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("pluginConfig.%s %q: %s", e.Key, e.Value, e.Reason)
}

// Translator turns a log line into NPD's Log (timestamp and message) with the pluginConfig's
// regular expressions. Mirrors NPD's filelog translator.
type Translator struct {
	timestampRegexp *regexp.Regexp
	messageRegexp   *regexp.Regexp
	timestampFormat string
	now             func() time.Time
}

// NewTranslator compiles the pluginConfig's timestamp and message regular expressions and checks
// that timestampFormat is set; NPD's newTranslatorOrDie, returning a *ConfigError instead of
// panicking. now gives the year of timestamps that have none (nil means time.Now).
func NewTranslator(pluginConfig map[string]string, now func() time.Time) (*Translator, error) {
	if now == nil {
		now = time.Now
	}
	t := &Translator{timestampFormat: pluginConfig[KeyTimestampFormat], now: now}
	for _, k := range []string{KeyTimestamp, KeyMessage, KeyTimestampFormat} {
		if pluginConfig[k] == "" {
			return nil, &ConfigError{Key: k, Reason: "must be set for the filelog source"}
		}
	}
	var err error
	if t.timestampRegexp, err = regexp.Compile(pluginConfig[KeyTimestamp]); err != nil {
		return nil, &ConfigError{Key: KeyTimestamp, Value: pluginConfig[KeyTimestamp], Reason: err.Error()}
	}
	if t.messageRegexp, err = regexp.Compile(pluginConfig[KeyMessage]); err != nil {
		return nil, &ConfigError{Key: KeyMessage, Value: pluginConfig[KeyMessage], Reason: err.Error()}
	}
	return t, nil
}

// Translate parses one line (without its newline). As NPD, when a regular expression has
// submatches the last one is used; a timestamp without a year gets the current year, and is read
// in the local time zone. Mirrors translator.translate and formalizeTimestamp.
func (t *Translator) Translate(line string) (*logtypes.Log, error) {
	matches := t.timestampRegexp.FindStringSubmatch(line)
	if len(matches) == 0 {
		return nil, fmt.Errorf("no timestamp found in line %q with regular expression %v", line, t.timestampRegexp)
	}
	timestamp, err := time.ParseInLocation(t.timestampFormat, matches[len(matches)-1], time.Local)
	if err != nil {
		return nil, fmt.Errorf("failed to parse timestamp %q: %v", matches[len(matches)-1], err)
	}
	if timestamp.Year() == 0 {
		timestamp = timestamp.AddDate(t.now().Year(), 0, 0)
	}
	matches = t.messageRegexp.FindStringSubmatch(line)
	if len(matches) == 0 {
		return nil, fmt.Errorf("no message found in line %q with regular expression %v", line, t.messageRegexp)
	}
	return &logtypes.Log{Timestamp: timestamp, Message: matches[len(matches)-1]}, nil
}
