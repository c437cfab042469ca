package config

import (
	"errors"
	"fmt"
	"strings"

	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// ErrStrict is wrapped in UnmarshalStrict's and DecodeStrict's error when the document is well formed
// but breaks a strict rule: an unknown, duplicate or mis-cased field.
var ErrStrict = errors.New("strict decoding error")

// UnmarshalStrict decodes the JSON js into v as the kubelet's strict codec does (sigs.k8s.io/json):
// field names are case-sensitive and an unknown or duplicate field is an error (encoding/json alone
// would take "maxpods" for maxPods). It returns the syntax or type error as is, or an error wrapping
// ErrStrict that lists every strict problem.
func UnmarshalStrict(js []byte, v any) error {
	strictErrs, err := kjson.UnmarshalStrict(js, v)
	if err != nil {
		return err
	}
	if len(strictErrs) > 0 {
		msgs := make([]string, 0, len(strictErrs))
		for _, e := range strictErrs {
			msgs = append(msgs, e.Error())
		}
		return fmt.Errorf("%w: %s", ErrStrict, strings.Join(msgs, ", "))
	}
	return nil
}

// DecodeStrict is UnmarshalStrict of a YAML or JSON document (a duplicate YAML key is an error too).
// Used for every file an operator gives (--config, --node-template).
func DecodeStrict(data []byte, v any) error {
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return err
	}
	return UnmarshalStrict(js, v)
}
