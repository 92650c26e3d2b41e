// Command siw is gosiw's client tool: dump (decode iWARP captures), probe
// (report what an iWARP peer does), and more to come.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	root := &cobra.Command{
		Use:           "siw",
		Short:         "gosiw client tool",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newDumpCmd(), newProbeCmd(), newPingCmd(), newPerfCmd(), newRegionCmd(), newNVMeCmd())
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "siw:", err)
		os.Exit(1)
	}
}
