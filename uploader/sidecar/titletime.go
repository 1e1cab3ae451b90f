package sidecar

import (
	"fmt"
	"time"
)

// titleTime is what a title template sees as .ModTime: time.Time's
// methods a title needs, each bounded. Format takes a layout of at most
// maxLayout bytes, so that nesting Format calls (each may grow its layout:
// "Monday" becomes "Wednesday") cannot build an ever longer string.
type titleTime struct{ t time.Time }

const maxLayout = 256

func (t titleTime) Format(layout string) (string, error) {
	if len(layout) > maxLayout {
		return "", fmt.Errorf("title template: a time layout is longer than %d bytes", maxLayout)
	}
	return t.t.Format(layout), nil
}

func (t titleTime) String() string                     { return t.t.String() }
func (t titleTime) Year() int                          { return t.t.Year() }
func (t titleTime) Month() time.Month                  { return t.t.Month() }
func (t titleTime) Day() int                           { return t.t.Day() }
func (t titleTime) Hour() int                          { return t.t.Hour() }
func (t titleTime) Minute() int                        { return t.t.Minute() }
func (t titleTime) Second() int                        { return t.t.Second() }
func (t titleTime) Nanosecond() int                    { return t.t.Nanosecond() }
func (t titleTime) YearDay() int                       { return t.t.YearDay() }
func (t titleTime) Weekday() time.Weekday              { return t.t.Weekday() }
func (t titleTime) Unix() int64                        { return t.t.Unix() }
func (t titleTime) UnixMilli() int64                   { return t.t.UnixMilli() }
func (t titleTime) IsZero() bool                       { return t.t.IsZero() }
func (t titleTime) UTC() titleTime                     { return titleTime{t.t.UTC()} }
func (t titleTime) Local() titleTime                   { return titleTime{t.t.Local()} }
func (t titleTime) Add(d time.Duration) titleTime      { return titleTime{t.t.Add(d)} }
func (t titleTime) AddDate(y, m, d int) titleTime      { return titleTime{t.t.AddDate(y, m, d)} }
func (t titleTime) Truncate(d time.Duration) titleTime { return titleTime{t.t.Truncate(d)} }
func (t titleTime) Round(d time.Duration) titleTime    { return titleTime{t.t.Round(d)} }

// titleData is TitleData as a template sees it.
type titleData struct {
	Stem, Name, Dir, RelDir string
	ModTime                 titleTime
}

func (d TitleData) bounded() titleData {
	return titleData{Stem: d.Stem, Name: d.Name, Dir: d.Dir, RelDir: d.RelDir, ModTime: titleTime{d.ModTime}}
}
