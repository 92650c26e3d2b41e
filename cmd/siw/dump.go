package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// Placeholder until the layers stream decoder lands (issue 2).
func newDumpCmd() *cobra.Command {
	return &cobra.Command{Use: "dump FILE", RunE: func(*cobra.Command, []string) error { return errors.New("dump: not built yet") }}
}
