package admin

type ui struct{}

func newUI() (*ui, error) { return &ui{}, nil }

func (h *Handler) mountUI() {}
