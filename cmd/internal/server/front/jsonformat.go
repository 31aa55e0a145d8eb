package front

import (
	"bytes"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
)

// JSONFormatter writes logrus entries as JSON lines. Its output is
// byte-for-byte what logrus.JSONFormatter{TimestampFormat: TimestampFormat}
// writes for the same entry (keys sorted, HTML-escaped strings, errors as
// their text, encoding/json's number spelling, one '\n'), but it appends to
// the entry's pooled buffer by hand instead of copying the fields into a new
// map and walking it with reflection: the per-request summary line was ~30%
// of the front's CPU (issue 7). Shapes it does not handle itself (caller
// reporting, fields clashing with time/msg/level/logrus_error, skipped func
// fields, NaN and infinities) go to logrus.JSONFormatter, so every entry
// still prints exactly as logrus would print it, errors included.
type JSONFormatter struct {
	// TimestampFormat is a time.Format layout; "" is time.RFC3339, as in logrus.
	TimestampFormat string
}

var _ logrus.Formatter = (*JSONFormatter)(nil)

// inlineKeys bounds the fields sorted without a heap allocation.
const inlineKeys = 24

// field is one key of the line and its value; the standard keys (level, msg,
// time) have a nil value and are told apart by a standard flag.
type field struct {
	key      string
	val      any
	standard bool
}

// Format renders one entry into entry.Buffer (logrus's pooled buffer).
func (f *JSONFormatter) Format(entry *logrus.Entry) ([]byte, error) {
	if entry.Caller != nil || skippedFields(entry) {
		return f.logrus(entry)
	}
	var arr [inlineKeys]field
	fields := arr[:0]
	for k, v := range entry.Data {
		switch k {
		case logrus.FieldKeyTime, logrus.FieldKeyMsg, logrus.FieldKeyLevel, logrus.FieldKeyLogrusError:
			return f.logrus(entry) // logrus renames these to "fields.<key>"
		}
		fields = append(fields, field{key: k, val: v})
	}
	fields = append(fields, field{key: logrus.FieldKeyLevel, standard: true},
		field{key: logrus.FieldKeyMsg, standard: true}, field{key: logrus.FieldKeyTime, standard: true})
	sortFields(fields)

	b := entry.Buffer
	if b == nil {
		b = new(bytes.Buffer)
	}
	b.Grow(128 + 48*len(fields))
	dst := b.AvailableBuffer()
	for i, fd := range fields {
		if i == 0 {
			dst = append(dst, '{')
		} else {
			dst = append(dst, ',')
		}
		dst = appendJSONString(dst, fd.key)
		dst = append(dst, ':')
		switch {
		case !fd.standard:
			var ok bool
			if dst, ok = appendJSONValue(dst, fd.val); !ok {
				return f.logrus(entry)
			}
		case fd.key == logrus.FieldKeyLevel:
			dst = appendJSONString(dst, entry.Level.String())
		case fd.key == logrus.FieldKeyMsg:
			dst = appendJSONString(dst, entry.Message)
		default:
			dst = f.appendTime(dst, entry.Time)
		}
	}
	dst = append(dst, '}', '\n')
	b.Write(dst)
	return b.Bytes(), nil
}

// sortFields orders fields by key bytes, as encoding/json orders map keys.
// Keys are unique. A log line has about a dozen: insertion sort beats
// slices.SortFunc's indirect comparisons there.
func sortFields(fs []field) {
	if len(fs) > inlineKeys {
		slices.SortFunc(fs, func(a, b field) int { return strings.Compare(a.key, b.key) })
		return
	}
	for i := 1; i < len(fs); i++ {
		for j := i; j > 0 && fs[j].key < fs[j-1].key; j-- {
			fs[j], fs[j-1] = fs[j-1], fs[j]
		}
	}
}

// logrus formats the entry the slow, reference way.
func (f *JSONFormatter) logrus(entry *logrus.Entry) ([]byte, error) {
	return (&logrus.JSONFormatter{TimestampFormat: f.TimestampFormat}).Format(entry)
}

// appendTime appends the timestamp as a JSON string. The usual layouts give
// only characters that need no escaping; any other output is re-quoted.
func (f *JSONFormatter) appendTime(dst []byte, t time.Time) []byte {
	layout := f.TimestampFormat
	if layout == "" {
		layout = time.RFC3339
	}
	n := len(dst)
	dst = append(dst, '"')
	dst = t.AppendFormat(dst, layout)
	for _, c := range dst[n+1:] {
		if !htmlSafe(c) {
			s := string(dst[n+1:])
			return appendJSONString(dst[:n], s)
		}
	}
	return append(dst, '"')
}

// errIndex is the index of logrus.Entry's unexported err field, which holds
// "skipping unsupported field ..." when WithFields dropped a func value and
// which logrus.JSONFormatter prints as logrus_error; -1 if logrus lost it.
var errIndex = func() int {
	f, ok := reflect.TypeFor[logrus.Entry]().FieldByName("err")
	if !ok || len(f.Index) != 1 || f.Type.Kind() != reflect.String {
		return -1
	}
	return f.Index[0]
}()

// skippedFields reports whether logrus dropped fields from the entry (read
// through reflection: the field is unexported, and reading it allocates nothing).
func skippedFields(entry *logrus.Entry) bool {
	return errIndex >= 0 && reflect.ValueOf(entry).Elem().Field(errIndex).Len() > 0
}
