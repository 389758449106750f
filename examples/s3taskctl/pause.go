package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
)

// pausedDoc is what pause, resume and paused print with -json: the task
// types paused after the command.
type pausedDoc struct {
	Paused []string `json:"paused"`
}

// pauseCmd is pause (on) or resume (off) of one task type.
func pauseCmd(on bool) func(fs *flag.FlagSet) runFunc {
	return func(fs *flag.FlagSet) runFunc {
		return func(ctx context.Context, c *cli, args []string) error {
			store, err := c.open(ctx)
			if err != nil {
				return err
			}
			typ := args[0]
			if on {
				err = store.Pause(ctx, typ)
			} else {
				err = store.Resume(ctx, typ)
			}
			if err != nil {
				return err
			}
			return printPaused(ctx, c)
		}
	}
}

func pausedCmd(fs *flag.FlagSet) runFunc {
	return func(ctx context.Context, c *cli, _ []string) error {
		return printPaused(ctx, c)
	}
}

// printPaused prints the task types paused now.
func printPaused(ctx context.Context, c *cli) error {
	store, err := c.open(ctx)
	if err != nil {
		return err
	}
	types, err := store.Paused(ctx)
	if err != nil {
		return err
	}
	if c.set.json {
		c.writeJSON(pausedDoc{Paused: append([]string{}, types...)})
		return nil
	}
	if len(types) == 0 {
		fmt.Fprintln(c.stdout, "no task type is paused")
		return nil
	}
	names := make([]string, len(types))
	for i, t := range types {
		names[i] = clean(t, 128)
		if t == "" {
			names[i] = `"" (untyped tasks)`
		}
	}
	fmt.Fprintf(c.stdout, "paused: %s\n", strings.Join(names, ", "))
	return nil
}
