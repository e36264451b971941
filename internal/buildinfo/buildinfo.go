// Package buildinfo names the version of the running binary, for the
// commands' --version output and the daemon's GetServerInfo.
package buildinfo

import "runtime/debug"

// Version is ldflags (a main.version set with -ldflags "-X main.version=...")
// if set; otherwise what the go command recorded: the module version, or for
// a development build "devel-" and the VCS revision, so that two builds of
// different commits never report the same version.
func Version(ldflags string) string {
	if ldflags != "" {
		return ldflags
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	return fromBuildInfo(bi)
}

func fromBuildInfo(bi *debug.BuildInfo) string {
	v := bi.Main.Version
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = "+dirty"
			}
		}
	}
	if (v == "" || v == "(devel)") && rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		return "devel-" + rev + modified
	}
	if v == "" {
		return "(devel)"
	}
	return v
}
