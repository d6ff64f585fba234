package provider_test

import (
	"testing"
	"time"

	"github.com/onejob/onejob/internal/provider"
)

func TestKeyRetention(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, mpt, retention string
		want                 time.Duration // 0: invalid
	}{
		{"DefaultsToTheContractsMinimum", "", "", provider.DefaultMaxProcessingTime},
		{"DefaultsToItsMaxProcessingTime", "2m", "", 2 * time.Minute},
		{"Declared", "", "24h", 24 * time.Hour},
		{"NeverBelowTheMinimum", "10m", "5m", 0},
		{"NotADuration", "", "a day", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := provider.ProviderConfig{Name: "w", Kind: provider.KindWebhook, MaxProcessingTime: tc.mpt, KeyRetention: tc.retention}.KeyRetentionOf()
			if tc.want == 0 && err == nil || tc.want != 0 && (err != nil || got != tc.want) {
				t.Fatalf("KeyRetentionOf = %s, %v; want %s", got, err, tc.want)
			}
		})
	}
}
