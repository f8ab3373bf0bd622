package bench

import "context"

// attachCoordinator gives s a coordinator for the image and admin rows,
// or records why it cannot.
func attachCoordinator(ctx context.Context, env *runEnv, s *System) {
	if s.Missing == nil {
		s.Missing = map[string]string{}
	}
	s.Missing["coordinator"] = "the coordinator (core/image, coordinator/ admin API) has not landed yet"
}
