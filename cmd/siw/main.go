// Command siw is gosiw's client tool: dump (decode iWARP captures), probe
// (report what an iWARP peer does), and more to come.
//
// gosiw is licensed under the Apache License, Version 2.0: see the LICENSE
// file at the root of the module.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/gosiw/gosiw/internal/version"
)

func main() {
	root := &cobra.Command{
		Use:           "siw",
		Short:         "gosiw client tool",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version.Get().String(),
	}
	root.SetVersionTemplate("siw {{.Version}}\n")
	root.AddCommand(newDumpCmd(), newProbeCmd(), newPingCmd(), newPerfCmd(), newRegionCmd(), newNVMeCmd())
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "siw:", err)
		os.Exit(1)
	}
}
