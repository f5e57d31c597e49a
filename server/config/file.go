package config

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2"
)

// ReadFile reads a configuration file: a TOML document whose keys are the
// names of the variables in Vars (HERALD_ADDR = "0.0.0.0:8080") and whose
// values are strings, numbers, booleans or lists (joined with commas, for
// the comma-separated settings). It returns each setting as the string the
// environment variable would hold. Unknown keys, tables and other values are
// errors, and so is a file that anyone but its owner may write: it can set
// the admin token and app secrets.
//
// TOML rather than YAML: its values have one meaning each (no "no" read as
// false, no 0123 read as a number), so what the operator writes is what the
// variable gets.
func ReadFile(path string) (map[string]string, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("configuration file: %w", err)
	}
	if mode := info.Mode().Perm(); mode&0o022 != 0 {
		return nil, fmt.Errorf("configuration file %s has mode %04o: others could change any setting; chmod go-w it", path, mode)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("configuration file: %w", err)
	}
	var doc map[string]any
	if err := toml.Unmarshal(data, &doc); err != nil {
		var de *toml.DecodeError
		if errors.As(err, &de) {
			row, col := de.Position()
			return nil, fmt.Errorf("configuration file %s:%d:%d: %s", path, row, col, strings.TrimPrefix(de.Error(), "toml: "))
		}
		return nil, fmt.Errorf("configuration file %s: %w", path, err)
	}
	keys := make([]string, 0, len(doc))
	for k := range doc {
		keys = append(keys, k)
	}
	slices.Sort(keys) // errors in a stable order
	out := make(map[string]string, len(doc))
	var errs []error
	for _, k := range keys {
		if _, ok := lookupVar(k); !ok || k == "HERALD_CONFIG" {
			errs = append(errs, fmt.Errorf("configuration file %s: unknown setting %q (the keys are the HERALD_* variables of herald serve --help)", path, k))
			continue
		}
		v, err := fileValue(doc[k])
		if err != nil {
			errs = append(errs, fmt.Errorf("configuration file %s: %s: %w", path, k, err))
			continue
		}
		out[k] = v
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// fileValue turns one TOML value into the text of an environment variable.
func fileValue(v any) (string, error) {
	switch v := v.(type) {
	case string:
		return v, nil
	case bool:
		return strconv.FormatBool(v), nil
	case int64:
		return strconv.FormatInt(v, 10), nil
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64), nil
	case []any:
		items := make([]string, 0, len(v))
		for _, item := range v {
			s, err := fileValue(item)
			if err != nil {
				return "", err
			}
			if _, nested := item.([]any); nested || strings.Contains(s, ",") {
				return "", errors.New("a list holds plain items without commas")
			}
			items = append(items, s)
		}
		return strings.Join(items, ","), nil
	case map[string]any:
		return "", errors.New("must be a string, number, boolean or list, not a table")
	default:
		return "", fmt.Errorf("must be a string, number, boolean or list, not a %T", v)
	}
}

// WithFile returns getenv with the settings of the configuration file at
// path beneath it: a variable the environment leaves empty is read from the
// file. With an empty path it returns getenv itself.
func WithFile(getenv func(string) string, path string) (func(string) string, error) {
	if path == "" {
		return getenv, nil
	}
	file, err := ReadFile(path)
	if err != nil {
		return nil, err
	}
	return func(name string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return file[name]
	}, nil
}
