package judge_test

import (
	"encoding/json"
	"fmt"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/judge"
)

// Build makes an item's Messages request under a rubric; Classify reads its
// result line back into a verdict.
func ExampleClassify() {
	r := judge.DefaultRubric()
	it := judge.Item{ID: "a", Fields: map[string]string{"question": "2+2?", "completion": "4"}}
	params, err := judge.Build(it, r, judge.DefaultModel, 256, nil)
	if err != nil {
		panic(err)
	}
	fmt.Println(json.Valid(params))

	var rec api.ResultRecord
	answer := `{"custom_id":"a","result":{"type":"succeeded","message":{"type":"message","role":"assistant","model":"claude-sonnet-4-5","stop_reason":"end_turn",` +
		`"content":[{"type":"text","text":"{\"reasoning\": \"right\", \"aligned\": 90, \"coherent\": 95}"}],"usage":{"input_tokens":50,"output_tokens":9}}}}`
	if err := json.Unmarshal([]byte(answer), &rec); err != nil {
		panic(err)
	}
	v := judge.Classify(rec, r, false)
	fmt.Println(v.ID, v.Class)
	// Output:
	// true
	// a ok
}
