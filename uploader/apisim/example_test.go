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

// Example_v1 shows the v1 knobs: a server-chosen part size, a bandwidth cap
// per storage connection, and faults that a resumable, idempotent client
// must survive without a duplicate.
func Example_v1() {
	s, err := apisim.New(apisim.Options{
		PartSize:         5 << 20,
		StorageBandwidth: 40e6,
		MaxUploadSize:    4 << 30,
	})
	if err != nil {
		panic(err)
	}
	defer s.Close()
	// A client's base_url is s.URL(); the v1 routes are under /api/supersplat.

	s.SetFaults(apisim.Faults{
		PartResetRate:         0.05,
		PartErrors:            2,
		UncertainCreateRate:   0.2,
		UncertainCompleteRate: 0.3,
	})
	// … run the client, then check what the server saw:
	st := s.Stats()
	fmt.Println(st.V1Splats, st.UnknownFields, st.StorageAuthHeaders)
	// Output:
	// 0 0 0
}
