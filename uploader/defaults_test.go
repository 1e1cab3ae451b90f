package uploader

import (
	"reflect"
	"testing"

	"github.com/splatd/splatd/uploader/apisim"
)

// TestPoolFillsDefaults: a pool whose options are left zero runs on the one
// table, Defaults, field by field (Timing's too).
func TestPoolFillsDefaults(t *testing.T) {
	t.Parallel()
	e := newWorkerEnv(t, apisim.Options{})
	o := PoolOptions{Store: e.store, Client: e.client}
	if err := o.fill(); err != nil {
		t.Fatal(err)
	}
	if compareTable(t, "", reflect.ValueOf(o), reflect.ValueOf(Defaults())) == 0 {
		t.Error("no field of the table compared")
	}
}

// compareTable reports each non-zero field of want that got does not
// equal, descending into structs, and returns how many it compared.
func compareTable(t *testing.T, prefix string, got, want reflect.Value) int {
	t.Helper()
	n := 0
	for i := range want.NumField() {
		f, name := want.Field(i), prefix+want.Type().Field(i).Name
		switch {
		case f.IsZero():
			continue // not in the table
		case f.Kind() == reflect.Struct:
			n += compareTable(t, name+".", got.Field(i), f)
			continue
		}
		n++
		if g := got.Field(i); !reflect.DeepEqual(g.Interface(), f.Interface()) {
			t.Errorf("zero %s filled as %v, want the table's %v", name, g.Interface(), f.Interface())
		}
	}
	return n
}
