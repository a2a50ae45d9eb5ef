package suggest

import "testing"

func TestClosest(t *testing.T) {
	known := []string{"cluster", "connect", "dns", "ftp", "http", "https", "ping"}
	for _, c := range []struct{ word, want string }{
		{"htp", "http"}, // ftp is 1 away too, but begins otherwise
		{"ftpp", "ftp"},
		{"http", "http"},
		{"htps", "https"}, // 1 away; http is 2
		{"conect", "connect"},
		{"clustr", "cluster"},
		{"dn", "dns"},
		{"gopher", ""},
		{"x", ""},
		{"", ""},
	} {
		if got := Closest(c.word, known); got != c.want {
			t.Errorf("Closest(%q) = %q, want %q", c.word, got, c.want)
		}
	}
}

func TestDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{{"", "", 0}, {"a", "", 1}, {"", "ab", 2}, {"kitten", "sitting", 3}, {"flaw", "lawn", 2}, {"same", "same", 0}} {
		if got := distance(c.a, c.b); got != c.want {
			t.Errorf("distance(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}
