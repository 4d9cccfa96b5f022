using System.Globalization;
using System.Net.Http.Json;
using Microsoft.Extensions.DependencyInjection;
using PersistentServices.Client;

// An application of the exactly-once client, configured by environment variables:
//   PS_CLIENT_STORE   the client's store directory (required)
//   PS_SERVICE_URL    the test service's base address (required)
//   PS_OPS            the operations to run: "recover" (only RecoverAsync), or a comma-separated list of operation ids
//   PS_CONCURRENCY    operations in flight at once (default 1)
//   PERSISTENTSERVICES_CRASH_POINT / PERSISTENTSERVICES_CRASH_AFTER   a client crash point (PersistentSessionClient)
//   PS_BENCH          "plain|persistent|key:<requests>": instead, times <requests> deposits per caller (PS_CONCURRENCY
//                     callers) with a plain HttpClient, through persistent sessions, or with Idempotency-Key; prints one line
// Each operation deposits 1 into the account named after it (POST /deposit). Output, one line each, flushed at once:
//   "recovered <op> <status> <body>" for each reply RecoverAsync hands back (always run first),
//   "delivered <op> <status> <body>" for each reply a call returns, and "done" at the end.
var services = new ServiceCollection();
services.AddHttpClient("svc", client => client.BaseAddress = new Uri(Environment.GetEnvironmentVariable("PS_SERVICE_URL")!))
    .AddPersistentSessions(options =>
    {
        options.StoreDirectory = Environment.GetEnvironmentVariable("PS_CLIENT_STORE")!;
        options.RetryDelay = TimeSpan.FromMilliseconds(20);
        options.MaxRetryDelay = TimeSpan.FromMilliseconds(300);
        options.MaxRetryAttempts = int.MaxValue;
        options.AttemptTimeout = TimeSpan.FromSeconds(10);
    });
await using var provider = services.BuildServiceProvider();
var factory = provider.GetRequiredService<IHttpClientFactory>();
var persistent = provider.GetRequiredKeyedService<PersistentSessionClient>("svc");
var output = new Lock();
if (Environment.GetEnvironmentVariable("PS_BENCH") is { Length: > 0 } bench)
{
    await Bench.RunAsync(bench, factory, Environment.GetEnvironmentVariable("PS_SERVICE_URL")!,
        int.Parse(Environment.GetEnvironmentVariable("PS_CONCURRENCY") ?? "1", CultureInfo.InvariantCulture), Environment.GetEnvironmentVariable("PS_CLIENT_STORE")!);
    return;
}


void Print(string what, string? op, int status, string body)
{
    lock (output)
    {
        Console.Out.WriteLine($"{what} {op} {status} {body}");
        Console.Out.Flush();
    }
}

await foreach (var recovered in persistent.RecoverAsync())
{
    Print("recovered", recovered.OperationId, (int?)recovered.Response?.StatusCode ?? 0, recovered.Response is null ? "" : await recovered.Response.Content.ReadAsStringAsync());
}

var ops = Environment.GetEnvironmentVariable("PS_OPS") ?? "recover";
if (ops != "recover")
{
    var concurrency = int.Parse(Environment.GetEnvironmentVariable("PS_CONCURRENCY") ?? "1", CultureInfo.InvariantCulture);
    await Parallel.ForEachAsync(ops.Split(','), new ParallelOptions { MaxDegreeOfParallelism = concurrency }, async (op, ct) =>
    {
        using var http = factory.CreateClient("svc");
        using var request = new HttpRequestMessage(HttpMethod.Post, "/deposit") { Content = JsonContent.Create(new { account = op, amount = 1 }) };
        request.Options.Set(PersistentRequestOptions.OperationId, op);
        using var response = await http.SendAsync(request, ct);
        Print("delivered", op, (int)response.StatusCode, await response.Content.ReadAsStringAsync(ct));
    });
}

Console.Out.WriteLine("done");
