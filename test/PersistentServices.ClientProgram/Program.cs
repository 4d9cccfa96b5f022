using System.Globalization;
using System.Net.Http.Json;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Hosting;
using PersistentServices.Client;

// An application of the exactly-once client, configured by environment variables:
//   PS_CLIENT_STORE   the client's store directory (required)
//   PS_SERVICE_URL    the test service's base address (required)
//   PS_OPS            the operations to run: "recover" (only RecoverAsync), or a comma-separated list of operation ids
//   PS_CONCURRENCY    operations in flight at once (default 1)
//   PERSISTENTSERVICES_CRASH_POINT / PERSISTENTSERVICES_CRASH_AFTER   a client crash point (PersistentSessionClient), read
//                     here and registered as the CrashPoints the client takes (the library reads no environment for it)
//   PS_SKIP_RECOVERED "1": operations whose reply RecoverAsync handed back are not run again
//   PS_MODE           "host": the same application inside a generic host (Host.CreateApplicationBuilder), stopped with
//                     IHost.StopAsync at the end (AddPersistentSessions' hosted service ends the idle sessions); prints
//                     "stopped" instead of "closed <n>"
//                     "key": instead of persistent sessions, a curl-style client that sends Idempotency-Key: <op> (no
//                     store; the test's record of its output is its journal), retrying each request until a 200
//   PS_KEY_CRASH_POINT / PS_KEY_CRASH_AFTER   the key client's crash points: key.request.created (nothing sent),
//                     key.request.sent (the request written and flushed, no reply read), key.reply.received (the reply
//                     read, not yet printed)
//   PS_BENCH          "plain|persistent|key:<requests>": instead, times <requests> deposits per caller (PS_CONCURRENCY
//                     callers) with a plain HttpClient, through persistent sessions, or with Idempotency-Key; prints
//                     one line
//   PS_BENCH          "pending[-plain]:<N>:<body bytes>": instead, the client's memory and disk per pending request
//                     (PendingBench.cs): N calls held by a service that never answers (a child process of this program,
//                     "hold:<ports>"); "-plain": a plain HttpClient (PS_PENDING_PAUSE=<seconds>: holds them that long
//                     after printing, to inspect the process)
// Each operation deposits 1 into the account named after it (POST /deposit). Output, one line each, flushed at once:
//   "recovered <op> <status> <body>" for each reply RecoverAsync hands back (always run first),
//   "delivered <op> <status> <body>" for each reply a call returns,
//   "repeated <op> 0 handed-over|outcome-unknown" for an operation the client refused as finished before
//   (PersistentOperationRepeatedException), "closed <n>" for the idle sessions ended at the service when it stops, and
//   "done" at the end.
if (Environment.GetEnvironmentVariable("PS_BENCH") is { } pendingSpec && pendingSpec.StartsWith("pending", StringComparison.Ordinal))
{
    await PendingBench.RunAsync(pendingSpec, Environment.GetEnvironmentVariable("PS_CLIENT_STORE")!);
    return;
}

if (Environment.GetEnvironmentVariable("PS_BENCH") is { } holdSpec && holdSpec.StartsWith("hold:", StringComparison.Ordinal))
{
    await PendingBench.HoldAsync(holdSpec);
    return;
}

var builder = Environment.GetEnvironmentVariable("PS_MODE") == "host" ? Host.CreateApplicationBuilder() : null;
var services = builder?.Services ?? new ServiceCollection();
services.AddSingleton(new PersistentServices.Checkpoints.CrashPoints(
    Environment.GetEnvironmentVariable("PERSISTENTSERVICES_CRASH_POINT"),
    int.TryParse(Environment.GetEnvironmentVariable("PERSISTENTSERVICES_CRASH_AFTER"), out var crashAfter) ? crashAfter : 0));
services.AddHttpClient("svc", client => client.BaseAddress = new Uri(Environment.GetEnvironmentVariable("PS_SERVICE_URL")!))
    .AddPersistentSessions(options =>
    {
        options.StoreDirectory = Environment.GetEnvironmentVariable("PS_CLIENT_STORE")!;
        options.RetryDelay = TimeSpan.FromMilliseconds(20);
        options.MaxRetryDelay = TimeSpan.FromMilliseconds(300);
        options.MaxRetryAttempts = int.MaxValue;
        options.AttemptTimeout = TimeSpan.FromSeconds(10);
    });
using var host = builder?.Build();
await using var ownProvider = host is null ? services.BuildServiceProvider() : null;
IServiceProvider provider = host?.Services ?? ownProvider!;
if (host is not null)
{
    await host.StartAsync();
}

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

if (Environment.GetEnvironmentVariable("PS_MODE") == "key")
{
    await KeyClient.RunAsync(Environment.GetEnvironmentVariable("PS_SERVICE_URL")!, (Environment.GetEnvironmentVariable("PS_OPS") ?? "").Split(',', StringSplitOptions.RemoveEmptyEntries),
        int.Parse(Environment.GetEnvironmentVariable("PS_CONCURRENCY") ?? "1", CultureInfo.InvariantCulture), Print);
    Console.Out.WriteLine("done");
    return;
}

var recoveredOps = new HashSet<string>(StringComparer.Ordinal);
await foreach (var recovered in persistent.RecoverAsync())
{
    if (recovered.OperationId is { } id)
    {
        recoveredOps.Add(id);
    }

    Print("recovered", recovered.OperationId, (int?)recovered.Response?.StatusCode ?? 0, recovered.Response is null ? "" : await recovered.Response.Content.ReadAsStringAsync());
}

var ops = Environment.GetEnvironmentVariable("PS_OPS") ?? "recover";
if (Environment.GetEnvironmentVariable("PS_SKIP_RECOVERED") == "1")
{
    ops = string.Join(',', ops.Split(',').Where(op => !recoveredOps.Contains(op)));
    ops = ops.Length == 0 ? "recover" : ops;
}

if (ops != "recover")
{
    var concurrency = int.Parse(Environment.GetEnvironmentVariable("PS_CONCURRENCY") ?? "1", CultureInfo.InvariantCulture);
    await Parallel.ForEachAsync(ops.Split(','), new ParallelOptions { MaxDegreeOfParallelism = concurrency }, async (op, ct) =>
    {
        using var http = factory.CreateClient("svc");
        using var request = new HttpRequestMessage(HttpMethod.Post, "/deposit") { Content = JsonContent.Create(new { account = op, amount = 1 }) };
        request.Options.Set(PersistentRequestOptions.OperationId, op);
        HttpResponseMessage response;
        try
        {
            response = await http.SendAsync(request, ct);
        }
        catch (PersistentOperationRepeatedException repeated)
        {
            // Finished before the application's crash (its reply handed over, never used): refused, not run again.
            Print("repeated", op, 0, repeated.ReplyHandedOver ? "handed-over" : "outcome-unknown");
            return;
        }

        using (response)
        {
            Print("delivered", op, (int)response.StatusCode, await response.Content.ReadAsStringAsync(ct));
        }
    });
}

// Stopping: idle sessions are ended at the service (a host does this itself through AddPersistentSessions' hosted
// service).
if (host is not null)
{
    await host.StopAsync();
    Console.Out.WriteLine("stopped");
}
else
{
    Console.Out.WriteLine($"closed {await persistent.CloseIdleSessionsAsync()}");
}

Console.Out.WriteLine("done");
