package file

// testHooks are the points where a test watches the store's steps or
// makes them fail. Open never sets them: in production Store.hooks is nil,
// and each hook costs one nil check.
type testHooks struct {
	// sync runs before each journal or log fdatasync, and can fail it.
	sync func() error
	// step runs at each durable step of a fold or rewrite (see foldLocked
	// and newGeneration), naming it: a test copies the data dir there to
	// see what a crash at that moment leaves.
	step func(name string)
	// walStep runs at each step of retiring a log segment and of reusing a
	// spare (see sealSegment and reuseFile), naming it, as step does.
	walStep func(name string)
	// write runs after beginWrite, before a write changes the session's
	// files (e.wmu held).
	write func(e *entry)
	// mark runs before a checkpoint writes its mark, and can fail it (as a
	// crash there would leave it).
	mark func() error
	// pending runs before a journal's pending frames are written to its
	// file, and can fail the write.
	pending func() error
}

// step calls the test hook step, if set.
func (s *Store) step(name string) {
	if s.hooks != nil && s.hooks.step != nil {
		s.hooks.step(name)
	}
}

// walStep calls the test hook walStep, if set.
func (s *Store) walStep(name string) {
	if s.hooks != nil && s.hooks.walStep != nil {
		s.hooks.walStep(name)
	}
}

// hookWrite calls the test hook write, if set.
func (s *Store) hookWrite(e *entry) {
	if s.hooks != nil && s.hooks.write != nil {
		s.hooks.write(e)
	}
}

// hookPending calls the test hook pending, if set.
func (s *Store) hookPending() error {
	if s.hooks != nil && s.hooks.pending != nil {
		return s.hooks.pending()
	}
	return nil
}
