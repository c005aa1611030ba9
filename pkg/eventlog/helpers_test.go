package eventlog_test

import (
	"github.com/dshd/dshd/pkg/llm"
)

func userMsg(id, text string) llm.Message { return llm.NewUserMessage(id, text) }
