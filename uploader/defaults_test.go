package uploader

import (
	"reflect"
	"testing"

	"github.com/splatd/splatd/uploader/apisim"
)

// TestPoolFillsDefaults: a pool whose options are left zero runs on the one
// table, Defaults, field by field.
func TestPoolFillsDefaults(t *testing.T) {
	t.Parallel()
	e := newWorkerEnv(t, apisim.Options{})
	o := PoolOptions{Store: e.store, Client: e.client}
	if err := o.fill(); err != nil {
		t.Fatal(err)
	}
	def := Defaults()
	got := reflect.ValueOf(o)
	want := reflect.ValueOf(def)
	for i := range want.NumField() {
		f := want.Field(i)
		if f.IsZero() {
			continue // not in the table
		}
		if name := want.Type().Field(i).Name; !reflect.DeepEqual(got.Field(i).Interface(), f.Interface()) {
			t.Errorf("zero %s filled as %v, want the table's %v", name, got.Field(i).Interface(), f.Interface())
		}
	}
}
