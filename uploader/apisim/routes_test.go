package apisim

import (
	"testing"

	"github.com/splatd/splatd/uploader/api"
)

// TestRouteNamesMatchTheClient: the simulator's route names (the keys of
// Stats.Requests, Options.Classes and `splatd sim -class`) are the client's,
// which label splatd_api_requests_total, so an operator names a route the
// same way in both. Two v1 names differed (v1_list_splats, part_put).
func TestRouteNamesMatchTheClient(t *testing.T) {
	t.Parallel()
	pairs := map[string]string{
		RouteSignedURL:      api.RouteSignedURL,
		RouteStoragePut:     api.RouteStoragePut,
		RoutePublish:        api.RoutePublish,
		RouteGetSplat:       api.RouteGetSplat,
		RouteCheckpoints:    api.RouteCheckpoints,
		RouteV1Me:           api.RouteV1Me,
		RouteV1ListSplats:   api.RouteV1Splats,
		RouteV1GetSplat:     api.RouteV1GetSplat,
		RouteV1CreateUpload: api.RouteV1CreateUpload,
		RouteV1GetUpload:    api.RouteV1GetUpload,
		RouteV1PartURLs:     api.RouteV1PartURLs,
		RouteV1Complete:     api.RouteV1Complete,
		RoutePartPut:        api.RouteV1PartPut,
	}
	for sim, client := range pairs {
		if sim != client {
			t.Errorf("simulator route %q, client route %q: want one name", sim, client)
		}
	}
}
