package sog

import (
	"math"
)

// Generator is what meta.json's asset.generator says of this encoder.
const Generator = "splatd sog encoder"

// Meta is meta.json of a version 2 SOG.
type Meta struct {
	Version   int      `json:"version"`
	Asset     *Asset   `json:"asset,omitempty"`
	Count     int      `json:"count"`
	Antialias bool     `json:"antialias"`
	Means     MeansRef `json:"means"`
	Scales    Codebook `json:"scales"`
	Quats     Files    `json:"quats"`
	SH0       Codebook `json:"sh0"`
	SHN       *SHNRef  `json:"shN,omitempty"`
}

// Asset names the writer.
type Asset struct {
	Generator string `json:"generator"`
}

// MeansRef holds the log-domain position ranges.
type MeansRef struct {
	Mins  [3]float32 `json:"mins"`
	Maxs  [3]float32 `json:"maxs"`
	Files []string   `json:"files"`
}

// Codebook is a 256-entry codebook and its image.
type Codebook struct {
	Codebook []float32 `json:"codebook"`
	Files    []string  `json:"files"`
}

// Files is an attribute stored in images alone.
type Files struct {
	Files []string `json:"files"`
}

// SHNRef is the SH palette of bands 1..3.
type SHNRef struct {
	Count    int       `json:"count"`
	Bands    int       `json:"bands"`
	Codebook []float32 `json:"codebook"`
	Files    []string  `json:"files"`
}

// shCoeffs is the number of SH coefficients per colour channel at bands.
var shCoeffs = [...]int{0, 3, 8, 15}

// textureSize is the images' size for n splats: both sides multiples of 4.
func textureSize(n int) (w, h int) {
	w = int(math.Ceil(math.Sqrt(float64(n))/4)) * 4
	h = int(math.Ceil(float64(n)/float64(w)/4)) * 4
	return w, h
}
