package call_test

import (
	"fmt"

	"github.com/sluice-dev/sluice/call"
)

// Body is what goes on the wire: Sent when sluice added a prompt-cache
// breakpoint to the request, else Params as written.
func ExampleRequest_Body() {
	r := &call.Request{ID: "q-1", Params: []byte(`{"as":"written"}`)}
	fmt.Println(string(r.Body()))
	r.Sent = []byte(`{"as":"sent"}`)
	fmt.Println(string(r.Body()), string(r.Params))
	// Output:
	// {"as":"written"}
	// {"as":"sent"} {"as":"written"}
}
