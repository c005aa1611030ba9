package worker

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/preset"
)

// TestPresetVersionsReadEachVersionOnce: a version is read once and then served decoded; a
// failed read is not kept; a body past the bound is served but read again.
func TestPresetVersionsReadEachVersionOnce(t *testing.T) {
	var c presetVersions
	reads := 0
	k := presetVersion{tenant: uuid.New(), id: uuid.New(), version: 1}
	read := func(body preset.Body, err error) func() (preset.Preset, error) {
		return func() (preset.Preset, error) {
			reads++
			return preset.Preset{ID: k.id, Version: k.version, Body: body}, err
		}
	}
	for range 3 {
		p, err := c.get(k, read(preset.Body{Name: "a"}, nil))
		if err != nil || p.Body.Name != "a" {
			t.Fatalf("get: %+v, %v", p, err)
		}
	}
	if reads != 1 {
		t.Fatalf("%d reads of one version, want 1", reads)
	}
	gone := presetVersion{tenant: k.tenant, id: k.id, version: 2}
	for range 2 {
		if _, err := c.get(gone, read(preset.Body{}, preset.ErrNotFound)); !errors.Is(err, preset.ErrNotFound) {
			t.Fatalf("failed read: %v", err)
		}
	}
	if reads != 3 {
		t.Fatalf("%d reads, want a failed read not kept (3)", reads)
	}
	big := presetVersion{tenant: k.tenant, id: k.id, version: 3}
	for range 2 {
		if _, err := c.get(big, read(preset.Body{Name: strings.Repeat("x", maxPresetBytes/8+1)}, nil)); err != nil {
			t.Fatal(err)
		}
	}
	if reads != 5 {
		t.Fatalf("%d reads, want a body past the bound read each time (5)", reads)
	}
}
