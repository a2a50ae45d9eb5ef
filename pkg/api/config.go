package api

// PathConfig is the whole configuration as a configuration file (YAML;
// see "dlbctl apply --help"). GET returns it (?format=yaml, the default,
// or ?format=json): "dlbctl get". POST takes a file (YAML or JSON) and
// makes the configuration equal to it as one change, all or none, and
// answers a ConfigResult; with ?dry_run=true it says what it would change
// and changes nothing: "dlbctl apply -f FILE [--diff]". A refused file is
// answered with an Error whose Line and Path say where.
const PathConfig = "/v1/config"

// Formats of PathConfig.
const (
	FormatYAML = "yaml"
	FormatJSON = "json"
)

// ConfigResult answers a configuration file.
type ConfigResult struct {
	// Changes lists what the file changes (or, in a dry run, would),
	// in the order they are made; none when the configuration already
	// equals the file.
	Changes []ConfigChange `json:"changes"`
	// Applied says whether the changes were made: false for a dry run
	// and when there was nothing to change.
	Applied bool `json:"applied"`
	// Notes say what the change did that the operator may want to know;
	// Warnings name conditions that keep the configuration from working
	// as meant (a server that does not answer), with their remedy.
	Notes    []string `json:"notes,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
}

// Kinds of ConfigChange.
const (
	ChangeAdded   = "added"
	ChangeRemoved = "removed"
	ChangeChanged = "changed"
)

// ConfigChange is one change a configuration file makes.
type ConfigChange struct {
	// Kind is "added", "removed" or "changed".
	Kind string `json:"kind"`
	// Command is the dlbctl command that makes the change, in dscontrol's
	// words: "server add 198.18.0.100@80@198.18.0.21 weight 10".
	Command string `json:"command"`
	// Was gives the old values of what a set changes, in the same words
	// ("weight 20").
	Was string `json:"was,omitempty"`
}
