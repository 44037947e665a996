package keys_test

import (
	"fmt"
	"net/http"

	"github.com/sluice-dev/sluice/keys"
)

func ExampleLoad() {
	env := map[string]string{
		"ANTHROPIC_API_KEY":  "sk-ant-example-high-prio-0001",
		"ANTHROPIC_API_KEYS": "spare=sk-ant-example-spare-0002,sk-ant-example-high-prio-0001",
	}
	pool, err := keys.Load(keys.LoadOptions{Env: keys.EnvMap(env), NoDotEnv: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, k := range pool.Keys() {
		fmt.Printf("%v from %s\n", k, k.Source())
	}
	for _, w := range pool.Warnings() {
		fmt.Println("warning:", w)
	}
	// Output:
	// high_prio(…0001) from env ANTHROPIC_API_KEY
	// spare(…0002) from env ANTHROPIC_API_KEYS item 1
	// warning: key key2 (env ANTHROPIC_API_KEYS item 2) has the same value as high_prio (env ANTHROPIC_API_KEY): using it once, as high_prio
}

func ExampleKey_Apply() {
	env := map[string]string{"ANTHROPIC_BATCH_KEY": "sk-ant-example-batch-0002"}
	pool, _ := keys.Load(keys.LoadOptions{Env: keys.EnvMap(env), NoDotEnv: true})
	k, _ := pool.ByLabel("batch")

	req, _ := http.NewRequest("POST", "https://api.anthropic.com/v1/messages", nil)
	k.Apply(req.Header, keys.AuthXAPIKey)
	fmt.Println(req.Header.Get("x-api-key") != "", k)

	if k.MarkDead("authentication_error") {
		fmt.Println("dead:", k) // logged once
	}
	fmt.Println(k.MarkDead("again"), len(pool.Live()))
	// Output:
	// true batch(…0002)
	// dead: batch(…0002)
	// false 0
}
