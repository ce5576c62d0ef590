package cli

import (
	"slices"
	"testing"
)

// A view of every rank follows the first 16 (the console's maxRanksFollowed) and says which,
// so that a TrainJob of hundreds of nodes opens 16 log streams, not hundreds.
func TestFirstRanks(t *testing.T) {
	many := make([]int, 300)
	for i := range many {
		many[i] = i
	}
	kept, note := firstRanks(many, maxRanksFollowed)
	if !slices.Equal(kept, many[:16]) || note != "Showing ranks 0 to 15 of 300: choose a rank for another" {
		t.Errorf("firstRanks(300 ranks, %d) = %v, %q", maxRanksFollowed, kept, note)
	}
	for _, tc := range []struct {
		ranks []int
		most  int
	}{{many[:16], 16}, {many[:2], 16}, {many, 0}} {
		if kept, note := firstRanks(tc.ranks, tc.most); len(kept) != len(tc.ranks) || note != "" {
			t.Errorf("firstRanks(%d ranks, %d) = %d ranks, %q: want them all, no note", len(tc.ranks), tc.most, len(kept), note)
		}
	}
}
