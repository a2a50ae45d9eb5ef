package server

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/dlbproject/dlb/pkg/api"
	"github.com/dlbproject/dlb/pkg/config"
)

// keywords maps a wire field (its JSON name) to its parameter keyword
// where the two differ by more than the underscores.
var keywords = map[string]string{"xdp_mode": "xdp-mode"}

// Ops translates the wire's operations into the model's: every field an
// operation sets becomes a parameter named by its keyword (the JSON name
// without underscores: "return_address" is "returnaddress"), its value as
// text. The fields are read off api.Op, so a field added there reaches
// package config without a line here.
func Ops(in []api.Op) []config.Op {
	out := make([]config.Op, len(in))
	for i, o := range in {
		out[i] = toOp(o)
	}
	return out
}

var opFields = func() []reflect.StructField {
	t := reflect.TypeFor[api.Op]()
	fs := make([]reflect.StructField, t.NumField())
	for i := range fs {
		fs[i] = t.Field(i)
	}
	return fs
}()

func toOp(o api.Op) config.Op {
	op := config.Op{Object: config.Object(o.Object), Action: config.Action(o.Action), Target: o.Target}
	v := reflect.ValueOf(o)
	for i, f := range opFields {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "object", "action", "target", "", "-":
			continue
		}
		fv := v.Field(i)
		var vals []string
		switch fv.Kind() {
		case reflect.Pointer:
			if fv.IsNil() {
				continue
			}
			vals = []string{text(fv.Elem())}
		case reflect.Slice:
			if fv.IsNil() {
				continue
			}
			vals = make([]string, fv.Len())
			for j := range vals {
				vals[j] = text(fv.Index(j))
			}
		default:
			continue
		}
		kw, ok := keywords[name]
		if !ok {
			kw = strings.ReplaceAll(name, "_", "")
		}
		op.Params = append(op.Params, config.Param{Name: kw, Values: vals})
	}
	return op
}

// text formats a wire value as a parameter's text.
func text(v reflect.Value) string {
	switch v.Kind() {
	case reflect.String:
		return v.String()
	case reflect.Bool:
		if v.Bool() {
			return "yes"
		}
		return "no"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(v.Int(), 10)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return strconv.FormatUint(v.Uint(), 10)
	case reflect.Float32, reflect.Float64:
		return strconv.FormatFloat(v.Float(), 'g', -1, 64)
	}
	return fmt.Sprint(v.Interface())
}
