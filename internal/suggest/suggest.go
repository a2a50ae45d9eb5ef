// Package suggest finds, for a misspelt word, the word it was most likely
// meant to be, so that a refusal can ask "did you mean ...?".
package suggest

// Closest returns the candidate nearest to word by edit distance, if one
// is near: within a third of word's length (at least 1). Of candidates
// as near, one that begins as word does wins (a typo seldom changes the
// first letter: "htp" is "http" rather than "ftp"), then the first.
func Closest(word string, candidates []string) string {
	best, bestD := "", max(1, len(word)/3)+1
	for _, c := range candidates {
		d := distance(word, c)
		if d < bestD || d == bestD && best != "" && !sameStart(best, word) && sameStart(c, word) {
			best, bestD = c, d
		}
	}
	return best
}

func sameStart(a, b string) bool { return a != "" && b != "" && a[0] == b[0] }

// distance is the Levenshtein distance between a and b.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
