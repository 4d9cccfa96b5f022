using PersistentServices;

var builder = WebApplication.CreateBuilder(args);
builder.Services.AddControllers();

// The log: the service's only storage. Keep it on a persistent volume in production; here ./data/log.
builder.Services.AddPersistentServices(o =>
    o.LogDirectory = builder.Configuration["PersistentServices:LogDirectory"] ?? "data/log");

var app = builder.Build();
app.UsePersistentServices();   // POST /ps/sessions, the session protocol, recovery after a crash
app.MapControllers();
app.Run();
