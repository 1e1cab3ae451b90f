package apisim_test

import (
	"context"
	"fmt"
	"time"

	"github.com/splatd/splatd/uploader/apisim"
)

// Example shows how `splatd sim` and tests use the simulator: start it,
// hand its URL, CA file and token to a client, and switch faults at runtime.
func Example() {
	s, err := apisim.New(apisim.Options{
		Branches:        map[string]int{"main": 123},
		ProcessingDelay: 50 * time.Millisecond,
		Window:          10 * time.Second,
		Limits:          map[apisim.Class]int{apisim.ClassStrict: 5},
		Classes:         map[string]apisim.Class{apisim.RoutePublish: apisim.ClassStrict},
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(s.URL() != "", s.CAFile() != "", s.Token() != "")

	s.SetFaults(apisim.Faults{
		StorageResetRate:   0.1,
		ErrorRate:          map[string]float64{apisim.RoutePublish: 0.2},
		UncertainPublishes: 1,
	})

	ctx, cancel := context.WithCancel(context.Background())
	cancel() // `splatd sim` cancels on SIGINT/SIGTERM instead
	fmt.Println(s.Run(ctx))
	// Output:
	// true true true
	// <nil>
}
