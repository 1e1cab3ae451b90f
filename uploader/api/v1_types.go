package api

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/splatd/splatd/state"
)

// Limits of the SuperSplat API v1 (docs/api-v1.md), exact. The client refuses a
// request outside them with a *RequestError before anything is sent, except
// for title and description, which it cuts (see CreateUploadRequest).
const (
	MaxTitleLen          = 100            // title, in characters (runes)
	MaxDescriptionLen    = 5000           // description, in characters (runes)
	MaxContentLength     = 25_000_000_000 // contentLength, bytes
	MaxIdempotencyKeyLen = 200            // Idempotency-Key, characters
	MaxPartURLsPerCall   = 100            // part numbers per part-upload-urls call
	MaxPartNumber        = 10000          // part numbers are 1..MaxPartNumber; also complete's item limit
	MaxSplatsLimit       = 128            // GET /v1/splats limit
	MaxSplatsSkip        = 100000         // GET /v1/splats skip
	MaxSoftwareTools     = 6              // softwareTools items
	maxSplatIDLen        = 100            // splatId path parameter
	maxUploadIDLen       = 200            // uploadId path parameter
	maxClientVersionLen  = 64             // uploadClient.version
)

// UploadClientID is what splatd sends as uploadClient.id.
const UploadClientID = "splatd"

// SourceFormat is the format of the uploaded file (CreateUploadRequest).
type SourceFormat string

// Source formats of docs/api-v1.md. SourceFormatSPZ exists in one published
// revision only; splatd itself sends ply or sog.
const (
	SourceFormatPLY  SourceFormat = "ply"
	SourceFormatSOG  SourceFormat = "sog"
	SourceFormatSSOG SourceFormat = "ssog"
	SourceFormatLCC  SourceFormat = "lcc"
	SourceFormatSPZ  SourceFormat = "spz"
)

// Valid reports whether f is one of the SourceFormat constants.
func (f SourceFormat) Valid() bool {
	switch f {
	case SourceFormatPLY, SourceFormatSOG, SourceFormatSSOG, SourceFormatLCC, SourceFormatSPZ:
		return true
	}
	return false
}

// UploadStatus is an upload session's status. A value the contract does not
// name is kept as received; Known tells it apart.
type UploadStatus string

// Upload session statuses.
const (
	UploadCreated    UploadStatus = "created"
	UploadUploading  UploadStatus = "uploading"
	UploadProcessing UploadStatus = "processing" // completed by a client: the splat exists
	UploadCompleted  UploadStatus = "completed"  // the splat exists
	UploadCanceled   UploadStatus = "canceled"
)

// Known reports whether s is one of the UploadStatus constants.
func (s UploadStatus) Known() bool {
	switch s {
	case UploadCreated, UploadUploading, UploadProcessing, UploadCompleted, UploadCanceled:
		return true
	}
	return false
}

// SplatStatus is a v1 splat's processing status; unknown values are kept.
type SplatStatus string

// Splat statuses.
const (
	SplatProcessing SplatStatus = "processing"
	SplatCompleted  SplatStatus = "completed"
	SplatFailed     SplatStatus = "failed"
)

// Known reports whether s is one of the SplatStatus constants.
func (s SplatStatus) Known() bool {
	return s == SplatProcessing || s == SplatCompleted || s == SplatFailed
}

// Visibility is a v1 splat's visibility; unknown values are kept.
type Visibility string

// Visibilities. New v1 uploads are unlisted.
const (
	VisibilityListed   Visibility = "listed"
	VisibilityUnlisted Visibility = "unlisted"
)

// Me is the account behind the token (GET /v1/me).
type Me struct {
	ID       string
	Username string // "" when the server sends null
}

// SplatV1 is a splat as the v1 API describes it. Legacy Splat is the
// record of the legacy API; the two have different fields and statuses.
type SplatV1 struct {
	ID          string // 8-character public id
	Title       string
	Description string
	Status      SplatStatus
	Visibility  Visibility
	Format      string // "" while processing (null)
	Size        int64  // 0 while processing
	ViewerURL   string
	CreatedAt   time.Time
	UpdatedAt   time.Time
	CompletedAt *time.Time // nil while processing (null)
}

// Pagination is the offset paging of GET /v1/splats.
type Pagination struct {
	Skip, Limit, Total int
}

// SplatList is one page of the caller's splats, in the server's order.
type SplatList struct {
	Data       []SplatV1
	Pagination Pagination
}

// CreateUploadRequest is the body of POST /v1/splats/uploads. The client
// adds uploadClient {"id": "splatd", "version": ClientOptions.ClientVersion}
// and sends no other field.
type CreateUploadRequest struct {
	SourceFormat SourceFormat // required
	// ContentLength is the file size in bytes, 0..MaxContentLength; sent
	// when > 0, so the server can refuse an oversize file (413) before any
	// byte moves.
	ContentLength int64
	// Title is trimmed and cut to MaxTitleLen characters (never inside a
	// UTF-8 sequence); "" leaves the server's default.
	Title string
	// Description is cut to MaxDescriptionLen characters; "" is not sent.
	Description string
	// SoftwareTools are up to MaxSoftwareTools unique ids matching
	// ^[a-z0-9][a-z0-9-]{0,63}$; optional.
	SoftwareTools []string
}

// UploadSession is a v1 upload session: the answer of create and of the
// resume read (GET /v1/splats/uploads/{id}).
type UploadSession struct {
	ID            string
	Status        UploadStatus
	ContentLength int64
	// PartSize is chosen by the server: every part but the last has
	// exactly this size.
	PartSize int64
	// UploadedParts are the parts the server has seen, the truth on
	// resume. Items the client cannot use (no part number in 1..10000, no
	// ETag) are left out: such a part is simply sent again.
	UploadedParts []UploadedPart
	ExpiresAt     time.Time // zero if absent
	// SplatID is set when the server names the splat (some answers do
	// once the session is processing or completed); "" otherwise.
	SplatID string
}

// UploadedPart is one part the server has seen.
type UploadedPart struct {
	PartNumber int
	ETag       string // exactly as the server sent it, quotes included
	Size       int64  // bytes; meaningful only when HasSize
	HasSize    bool
}

// PartURLs is the answer of part-upload-urls.
type PartURLs struct {
	UploadID string
	PartSize int64
	// URLs holds one signed URL per part number asked for, in the order
	// asked.
	URLs []PartURL
}

// PartURL is the presigned S3 UploadPart URL of one part. Its query is a
// credential: String redacts it, so %v of a PartURL is safe to log.
type PartURL struct {
	PartNumber int
	URL        string
	ExpiresAt  time.Time // zero if absent
}

// String shows the part number, the URL without its query, and the expiry.
func (p PartURL) String() string {
	s := "part " + strconv.Itoa(p.PartNumber) + " " + state.RedactURL(p.URL)
	if !p.ExpiresAt.IsZero() {
		s += " expires " + p.ExpiresAt.UTC().Format(time.RFC3339)
	}
	return s
}

// CompletedPart is one item of the complete call: a part and the ETag its
// PUT returned, exactly as received.
type CompletedPart struct {
	PartNumber int
	ETag       string
}

// Completion is the answer of complete.
type Completion struct {
	UploadID string
	Status   UploadStatus // "completed"
	SplatID  string
	EditURL  string
	Location string // the Location header (the splat's API path), as received
}

// --- request bodies: closed schemas ----------------------------------------
//
// Only fields the contract names, optional ones with omitempty: an unknown
// field is a 400.

type wireUploadClient struct {
	ID      string `json:"id"`
	Version string `json:"version"`
}

type wireCreateUpload struct {
	SourceFormat  SourceFormat     `json:"sourceFormat"`
	ContentLength *int64           `json:"contentLength,omitempty"`
	Title         string           `json:"title,omitempty"`
	Description   string           `json:"description,omitempty"`
	UploadClient  wireUploadClient `json:"uploadClient"`
	SoftwareTools []string         `json:"softwareTools,omitempty"`
}

type wirePartNumbers struct {
	Parts []int `json:"parts"`
}

type wireCompletedPart struct {
	PartNumber int    `json:"partNumber"`
	ETag       string `json:"etag"`
}

type wireComplete struct {
	Parts []wireCompletedPart `json:"parts"`
}

// --- response bodies: open schemas, tolerant decoding ----------------------

type wireMe struct {
	ID       jsonText `json:"id"`
	Username jsonText `json:"username"`
}

type wireSplatV1 struct {
	ID          jsonText `json:"id"`
	Title       jsonText `json:"title"`
	Description jsonText `json:"description"`
	Status      jsonText `json:"status"`
	Visibility  jsonText `json:"visibility"`
	Format      jsonText `json:"format"`
	Size        jsonInt  `json:"size"`
	ViewerURL   jsonText `json:"viewerUrl"`
	CreatedAt   jsonTime `json:"createdAt"`
	UpdatedAt   jsonTime `json:"updatedAt"`
	CompletedAt jsonTime `json:"completedAt"`
}

func (w *wireSplatV1) splat() SplatV1 {
	s := SplatV1{
		ID:          strings.TrimSpace(string(w.ID)),
		Title:       string(w.Title),
		Description: string(w.Description),
		Status:      SplatStatus(strings.TrimSpace(string(w.Status))),
		Visibility:  Visibility(strings.TrimSpace(string(w.Visibility))),
		Format:      string(w.Format),
		Size:        int64(w.Size),
		ViewerURL:   strings.TrimSpace(string(w.ViewerURL)),
		CreatedAt:   w.CreatedAt.t,
		UpdatedAt:   w.UpdatedAt.t,
	}
	if w.CompletedAt.ok {
		t := w.CompletedAt.t
		s.CompletedAt = &t
	}
	return s
}

type wireSplatList struct {
	Data       wireArray `json:"data"`
	Pagination struct {
		Skip  jsonInt `json:"skip"`
		Limit jsonInt `json:"limit"`
		Total jsonInt `json:"total"`
	} `json:"pagination"`
}

// wireArray keeps the items of a JSON array for one-by-one decoding;
// anything but an array decodes as no items.
type wireArray []json.RawMessage

func (a *wireArray) UnmarshalJSON(b []byte) error {
	*a = nil
	if b = bytes.TrimSpace(b); len(b) == 0 || b[0] != '[' {
		return nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(b, &items); err != nil {
		return err
	}
	*a = items
	return nil
}

type wireUploadedPart struct {
	PartNumber jsonInt  `json:"partNumber"`
	ETag       jsonText `json:"etag"`
	Size       *jsonInt `json:"size"`
}

type wireUploadSession struct {
	ID            jsonText  `json:"id"`
	Status        jsonText  `json:"status"`
	ContentLength jsonInt   `json:"contentLength"`
	PartSize      jsonInt   `json:"partSize"`
	UploadedParts wireArray `json:"uploadedParts"`
	ExpiresAt     jsonTime  `json:"expiresAt"`
	SplatID       jsonText  `json:"splatId"`
}

func (w *wireUploadSession) session() UploadSession {
	s := UploadSession{
		ID:            strings.TrimSpace(string(w.ID)),
		Status:        UploadStatus(strings.TrimSpace(string(w.Status))),
		ContentLength: int64(w.ContentLength),
		PartSize:      int64(w.PartSize),
		ExpiresAt:     w.ExpiresAt.t,
		SplatID:       strings.TrimSpace(string(w.SplatID)),
	}
	for _, raw := range w.UploadedParts {
		var p wireUploadedPart
		if json.Unmarshal(raw, &p) != nil || p.PartNumber < 1 || p.PartNumber > MaxPartNumber || p.ETag == "" {
			continue
		}
		up := UploadedPart{PartNumber: int(p.PartNumber), ETag: string(p.ETag)}
		if p.Size != nil { // absent and null both leave it nil
			up.Size, up.HasSize = int64(*p.Size), true
		}
		s.UploadedParts = append(s.UploadedParts, up)
	}
	return s
}

type wirePartURL struct {
	PartNumber jsonInt  `json:"partNumber"`
	URL        jsonText `json:"url"`
	ExpiresAt  jsonTime `json:"expiresAt"`
}

type wirePartURLs struct {
	UploadID jsonText  `json:"uploadId"`
	PartSize jsonInt   `json:"partSize"`
	URLs     wireArray `json:"urls"`
}

type wireCompletion struct {
	UploadID jsonText `json:"uploadId"`
	Status   jsonText `json:"status"`
	SplatID  jsonText `json:"splatId"`
	EditURL  jsonText `json:"editUrl"`
}

// Outcome maps the splat's status to the outcome the poll acts on, as
// Splat.Outcome does for the legacy record.
func (s SplatV1) Outcome() Outcome {
	switch s.Status {
	case SplatProcessing:
		return OutcomePending
	case SplatCompleted:
		return OutcomeDone
	case SplatFailed:
		return OutcomeFailed
	}
	return OutcomeUnknown
}
