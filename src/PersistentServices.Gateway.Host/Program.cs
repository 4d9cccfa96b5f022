// The PersistentServices gateway (docs/gateway.md). Start it with the instances of each service, e.g.
//   dotnet run --project src/PersistentServices.Gateway.Host -- --urls http://127.0.0.1:8080 \
//     --PersistentGateway:Services:store:Persistent=true \
//     --PersistentGateway:PeerKey=<the services' Calls.PeerKey; better: PersistentGateway__PeerKey in the environment> \
//     --PersistentGateway:Services:store:Instances:0=http://127.0.0.1:5001 \
//     --PersistentGateway:Services:store:Instances:1=http://127.0.0.1:5002
// or the same keys in appsettings.json or environment variables (PersistentGateway__Services__store__Instances__0=...).
// It keeps no state: run as many copies as you like behind one address.
var builder = WebApplication.CreateBuilder(args);
builder.Services.AddPersistentGateway();
builder.Services.AddHealthChecks();

var app = builder.Build();
// The gateway's own health (the services' /health/* paths go through to the services).
app.MapHealthChecks("/ps-gateway/health");
app.MapPersistentGateway();
app.Run();
