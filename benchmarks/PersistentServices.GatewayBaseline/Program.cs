// YARP's direct forwarding and nothing else: every path to one backend (--Backend http://127.0.0.1:PORT).
// benchmarks/gateway/run.sh runs it in place of ps-gateway with GATEWAY=yarp (docs/benchmarks.md, "The gateway").
var builder = WebApplication.CreateBuilder(args);
builder.Services.AddHttpForwarder();
var app = builder.Build();
var backend = app.Configuration["Backend"] ?? throw new InvalidOperationException("Give the backend: --Backend http://127.0.0.1:PORT");
app.MapForwarder("/{**catch-all}", backend);
app.Run();
