package main

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/interlockhq/interlock/processor/approvers"
)

func newToken(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "token",
		Short: "Make a new API token for an approver, and the digest to put in the identities file",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			raw := make([]byte, 32)
			if _, err := rand.Read(raw); err != nil {
				return err
			}
			token := "il_" + base64.RawURLEncoding.EncodeToString(raw)
			if g.json {
				return printJSON(cmd.OutOrStdout(), map[string]string{"token": token, "digest": approvers.Digest(token)})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "token:  %s   (give this to the approver; it is not stored)\ndigest: %s   (put this under tokens: in the identities file)\n",
				token, approvers.Digest(token))
			return nil
		},
	}
}
