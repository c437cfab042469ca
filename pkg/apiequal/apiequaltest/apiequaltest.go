// Package apiequaltest checks a hand-written comparison of API values (package apiequal's callers)
// against apiequality.Semantic.DeepEqual: that it knows every field of the types it compares field by
// field (Fields), and that it agrees with Semantic.DeepEqual on random values (Agree). Only tests import
// it.
package apiequaltest

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/randfill"
)

// Fields fails t when typ's fields are not want, in order: the comparison named by compared would
// then miss a change of a new field.
func Fields(t testing.TB, compared string, typ reflect.Type, want []string) {
	t.Helper()
	var got []string
	for f := range typ.Fields() {
		got = append(got, f.Name)
	}
	if !slices.Equal(got, want) {
		t.Errorf("%v has fields %v; %s compares %v: compare the new ones", typ, got, compared, want)
	}
}

// Agree compares equal with Semantic.DeepEqual on n random values of T and on copies of them with one
// field, at any depth, filled again at random (seven in eight): often to an equal value in another form
// (the same quantity in another format, the same instant in another location, an empty slice for a
// nil one), often to a different one. prepare, if not nil, is applied to both values before they are
// compared (e.g. to clear the fields equal does not compare). It fails t at the first disagreement,
// and when fewer than n/8 pairs are equal or unequal (the generator would then test too little).
func Agree[T any, PT interface {
	*T
	DeepCopy() *T
}](t testing.TB, n int, equal func(a, b *T) bool, prepare func(*T)) {
	t.Helper()
	var equals, unequals int
	Pairs[T, PT](n, 1, func(i int, a, b *T) bool {
		if prepare != nil {
			prepare(a)
			prepare(b)
		}
		want := apiequality.Semantic.DeepEqual(a, b)
		if got := equal(a, b); got != want {
			t.Fatalf("case %d: %v, Semantic.DeepEqual %v\na: %#v\nb: %#v", i, got, want, *a, *b)
		}
		if want {
			equals++
		} else {
			unequals++
		}
		return true
	})
	if equals < n/8 || unequals < n/8 {
		t.Errorf("%d equal and %d unequal pairs: the generator should give plenty of both", equals, unequals)
	}
}

// Pairs calls f with n pairs of random values of T (the same seed every run): a, and b a copy of a with
// up to changes fields, at any depth, filled again at random (seven pairs in eight; the eighth leaves
// b equal to a). Strings, numbers, quantities and times are drawn from small sets, so that equal values
// in other forms (a quantity in another format, an instant in another zone, an empty slice for a nil
// one) are common. It stops early when f returns false.
func Pairs[T any, PT interface {
	*T
	DeepCopy() *T
}](n, changes int, f func(i int, a, b *T) bool) {
	formats := []resource.Format{resource.DecimalSI, resource.BinarySI, resource.DecimalExponent}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	times := []time.Time{{}, t0, t0.In(time.FixedZone("east", 3600)), t0.Add(time.Second)}
	fill := randfill.NewWithSeed(1).NilChance(0.3).NumElements(0, 2).Funcs(
		func(q *resource.Quantity, c randfill.Continue) {
			*q = *resource.NewQuantity(c.Int63n(3)*1024, formats[c.Intn(len(formats))])
		},
		func(s *string, c randfill.Continue) { *s = []string{"", "a", "b"}[c.Intn(3)] },
		func(n *int64, c randfill.Continue) { *n = c.Int63n(2) },
		func(n *int32, c randfill.Continue) { *n = c.Int31n(2) },
		func(b *bool, c randfill.Continue) { *b = c.Intn(2) == 0 },
		func(m *metav1.Time, c randfill.Continue) { m.Time = times[c.Intn(len(times))] },
	)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range n {
		a := new(T)
		fill.Fill(a)
		b := PT(a).DeepCopy()
		if r.IntN(8) > 0 {
			for range 1 + r.IntN(changes) {
				refill(reflect.ValueOf(b).Elem(), r, fill)
			}
		}
		if !f(i, a, b) {
			return
		}
	}
}

// refill fills one field of v again, picked at random among every field reachable from v through
// struct fields, slice elements and pointers (slices, pointers and maps themselves included), so that
// a field deep in a list of structs is as likely to change as a top-level one.
func refill(v reflect.Value, r *rand.Rand, fill *randfill.Filler) {
	var fields []reflect.Value
	var walk func(v reflect.Value)
	walk = func(v reflect.Value) {
		switch v.Kind() {
		case reflect.Struct:
			if v.Type() == reflect.TypeFor[metav1.Time]() || v.Type() == reflect.TypeFor[resource.Quantity]() {
				fields = append(fields, v)
				return
			}
			for i := range v.NumField() {
				walk(v.Field(i))
			}
		case reflect.Slice:
			fields = append(fields, v)
			for i := range v.Len() {
				walk(v.Index(i))
			}
		case reflect.Pointer:
			fields = append(fields, v)
			if !v.IsNil() {
				walk(v.Elem())
			}
		default:
			fields = append(fields, v)
		}
	}
	walk(v)
	fill.Fill(fields[r.IntN(len(fields))].Addr().Interface())
}
