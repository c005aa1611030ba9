package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Read-before-edit observations are kept in the workspace's directory, next to its files but
// outside them (no command can change them), in observed.json: {"files": {path: sha256}}. So
// they are as durable as the workspace itself, on the storage every replica shares, and a fork
// copies them with the files (its log holds the reads they come from). Only one replica runs a
// session's turn at a time (its run lease), and the observations of one workspace are updated
// under a lock, so one writer at a time updates the file, by an atomic rename.

type observations struct {
	Files map[string]string `json:"files"`
}

func (ws *Workspace) loadObservations() (observations, error) {
	var o observations
	b, err := os.ReadFile(ws.state)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return o, fmt.Errorf("sandbox: observations: %w", err)
	default:
		if err := json.Unmarshal(b, &o); err != nil {
			return o, fmt.Errorf("sandbox: observations: %w", err)
		}
	}
	if o.Files == nil {
		o.Files = map[string]string{}
	}
	return o, nil
}

// Observed returns the version (SHA-256, hex) of rel the tools last saw, and whether they saw it.
func (ws *Workspace) Observed(rel string) (string, bool, error) {
	ws.lock.Lock()
	defer ws.lock.Unlock()
	o, err := ws.loadObservations()
	if err != nil {
		return "", false, err
	}
	v, ok := o.Files[rel]
	return v, ok, nil
}

// Observe records that the tools saw (or wrote) version sha256 of rel.
func (ws *Workspace) Observe(rel, sha256 string) error {
	ws.lock.Lock()
	defer ws.lock.Unlock()
	o, err := ws.loadObservations()
	if err != nil {
		return err
	}
	if o.Files[rel] == sha256 {
		return nil
	}
	o.Files[rel] = sha256
	b, err := json.Marshal(o)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(ws.state), ".observed-*")
	if err != nil {
		return fmt.Errorf("sandbox: observations: %w", err)
	}
	_, werr := tmp.Write(b)
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), ws.state)
	}
	if werr != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("sandbox: observations: %w", werr)
	}
	return nil
}
