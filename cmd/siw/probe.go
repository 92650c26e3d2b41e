package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// Placeholder until the connection manager lands (issue 3).
func newProbeCmd() *cobra.Command {
	return &cobra.Command{Use: "probe HOST:PORT", RunE: func(*cobra.Command, []string) error { return errors.New("probe: not built yet") }}
}
