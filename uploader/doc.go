// Package uploader is the worker pool: it claims jobs from the store and
// advances each one committed stage at a time through the steps of the
// configured protocol (legacy: sign, PUT, publish; v1: an upload session,
// parts, complete), polls until processing ends and runs the after-action
// as the job's last stage. `splatd publish` runs the same pool over a store
// of one job (PublishOne).
//
// Every error goes through the one retry rule, state.Policy.Decide. What
// the pool needs of the outside is declared in options.go; the design is
// in docs/architecture.md ("Packages", "The uploader core").
package uploader
