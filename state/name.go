package state

import "encoding/json"

// jobJSON is a Job as stored: a file name that Shown escapes (JSON text
// cannot hold bytes that are not UTF-8) is kept as its bytes in path_bytes
// (root_bytes), beside its Shown form in path (root); any other name is
// stored as text alone.
type jobJSON struct {
	plainJob
	PathBytes []byte `json:"path_bytes,omitempty"`
	RootBytes []byte `json:"root_bytes,omitempty"`
}

// plainJob is Job without its JSON methods.
type plainJob Job

// ShownName returns name's Shown form and, when that differs from name,
// name's bytes: the pair a JSON record or view holds of a file's name.
func ShownName(name string) (string, []byte) {
	if shown := Shown(name); shown != name {
		return shown, []byte(name)
	}
	return name, nil
}

// record is j as stored.
func (j Job) record() jobJSON {
	out := jobJSON{plainJob: plainJob(j)}
	out.Path, out.PathBytes = ShownName(j.Path)
	out.Root, out.RootBytes = ShownName(j.Root)
	return out
}

// MarshalJSON encodes j with its file's name losslessly.
func (j Job) MarshalJSON() ([]byte, error) { return json.Marshal(j.record()) }

// UnmarshalJSON decodes a job, its name's bytes included.
func (j *Job) UnmarshalJSON(b []byte) error {
	var in jobJSON
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	if in.PathBytes != nil {
		in.Path = string(in.PathBytes)
	}
	if in.RootBytes != nil {
		in.Root = string(in.RootBytes)
	}
	*j = Job(in.plainJob)
	return nil
}
