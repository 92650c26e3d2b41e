package main

import (
	"io"
	"os"

	"github.com/spf13/cobra"
)

// stdio reports whether a --file value names standard input or output.
func stdio(file string) bool { return file == "" || file == "-" }

// readInput returns the whole of file, or of standard input when file is
// "" or "-".
func readInput(cmd *cobra.Command, file string) ([]byte, error) {
	if stdio(file) {
		return io.ReadAll(cmd.InOrStdin())
	}
	return os.ReadFile(file)
}

// output is where a command writes what it read: file (created or
// truncated), or standard output when file is "" or "-".
type output struct {
	io.Writer
	f *os.File
}

func openOutput(cmd *cobra.Command, file string) (*output, error) {
	if stdio(file) {
		return &output{Writer: cmd.OutOrStdout()}, nil
	}
	f, err := os.Create(file)
	if err != nil {
		return nil, err
	}
	return &output{Writer: f, f: f}, nil
}

// Close closes the file, if any; a failed close means the data may not
// have reached it. Safe to call twice (the second call does nothing).
func (o *output) Close() error {
	if o.f == nil {
		return nil
	}
	f := o.f
	o.f = nil
	return f.Close()
}
