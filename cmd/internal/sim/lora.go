package sim

import (
	"fmt"
	"strings"
)

// LoRA adapters, as vLLM serves them with --lora-modules: an adapter is a
// model name of its own, listed in /v1/models with "parent" = the base
// model, and a request naming it runs under the adapter. Its KV blocks are
// not the base model's: vLLM folds the adapter's name into every block hash
// of the request (and its KV events carry lora_name and lora_id), so the
// same token ids under the base model and under an adapter, or under two
// adapters, share no cached block.

// LoRAModule is one adapter the worker serves.
type LoRAModule struct {
	Name   string // the model name requests use
	Parent string // the base model it extends; "" is Config.Model
}

// loraFlag reads --lora name[=parent][,name[=parent]...], repeatable.
type loraFlag []LoRAModule

func (f *loraFlag) String() string {
	var parts []string
	for _, m := range *f {
		parts = append(parts, m.Name+"="+m.Parent)
	}
	return strings.Join(parts, ",")
}

func (f *loraFlag) Set(s string) error {
	for _, part := range strings.Split(s, ",") {
		name, parent, _ := strings.Cut(strings.TrimSpace(part), "=")
		if name == "" {
			return fmt.Errorf("want name[=parent][,...], got %q", s)
		}
		for _, m := range *f {
			if m.Name == name {
				return fmt.Errorf("adapter %q given twice", name)
			}
		}
		*f = append(*f, LoRAModule{Name: name, Parent: parent})
	}
	return nil
}

// adapterOf is the adapter a request's model names: its name and vLLM's
// lora_int_id (1 for the first --lora module, 2 for the next, ...); "" and
// 0 for any other model name (the base model).
func (w *Worker) adapterOf(model string) (string, int) {
	for i, m := range w.cfg.LoRA {
		if m.Name == model && model != "" {
			return m.Name, i + 1
		}
	}
	return "", 0
}

// modelCards is the /v1/models list: the base model, then each adapter with
// its parent, as vLLM's serving_models.py lists them.
func (w *Worker) modelCards() []any {
	cards := []any{map[string]any{
		"id": w.cfg.Model, "object": "model", "created": 0, "owned_by": "celflow-sim", "root": w.cfg.Model, "parent": nil,
	}}
	for _, m := range w.cfg.LoRA {
		parent := m.Parent
		if parent == "" {
			parent = w.cfg.Model
		}
		cards = append(cards, map[string]any{
			"id": m.Name, "object": "model", "created": 0, "owned_by": "celflow-sim", "root": "/sim/lora/" + m.Name, "parent": parent,
		})
	}
	return cards
}

// probePrompt is the prompt /sim/cache/probe looks up: ids under model's
// adapter, if model names one.
func (w *Worker) probePrompt(ids []int, model string) promptInfo {
	name, id := w.adapterOf(model)
	return promptInfo{Tokens: ids, LoRA: name, LoRAID: id}
}
