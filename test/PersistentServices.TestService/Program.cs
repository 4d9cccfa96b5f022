using System.Collections.Concurrent;
using FASTER.core;
using PersistentServices;
using PersistentServices.Log;
using PersistentServices.SharedState;

// Configured by environment variables (the tests start it as a child process on 127.0.0.1):
//   PS_LOG_DIR               log directory (required)
//   PS_REPLAY_PARALLELISM    PersistentServicesOptions.ReplayParallelism
//   PS_FAULT_FILE            while this file exists, every log write fails as on a full disk (ENOSPC)
//   PS_NOTIFY_FILE           /notify appends a line here from its Response.OnCompleted callback
//   PS_BLOCK_CHAIN           "1": /chain blocks inside its first update (a crash point for the tests)
//   PS_VERSION               the service's version: "2" adds a field to /deposit's reply (an upgrade whose replies differ)
//   PS_SERVICE_NAME, PS_PEER_KEY, PS_CALLEE_URL, PS_CALLEE_NAME, PS_CALLEE_SERVICE  calls between services: this
//                            service's name, the deployment's peer key, the base address of the service /pay calls, its
//                            client's name (default "bank"; inside a domain the member's name) and the callee's service
//                            name, which calls are signed for (default the client's name)
//   PS_LEGACY_SIGNATURES     PersistentCallOptions.LegacySignatures (Refuse | Accept | SignAndAccept)
//   PS_DOMAIN                the service domain: "A=http://127.0.0.1:5001,B=http://127.0.0.1:5002" (this service included)
//   PS_DIE_AFTER_CREDIT      "1": SIGKILL itself right after the reply to its first /bank/credit went out (a member that
//                            crashes before anything forced what it just told the caller)
//   PS_RELAY                 "1": /bank/credit also credits its own callee (a chain A -> B -> C)
//   PS_CALLEE2_NAME, PS_CALLEE2_URL  a second member /pay credits after the first (a fan-out A -> B, A -> C -> D)
//   PS_REFUSE_FLUSH_FILE     while this file exists, a member's distributed flush request (POST /ps/domain/flush) gets
//                            503, as from a member that is unreachable or still recovering (nothing else is affected)
//   PS_CALL_LOGGING          PersistentCallOptions.Logging (ForceEveryMessage | ForceBeforeEachCall | MultiCall)
//   PS_SESSION_CHECKPOINT_BYTES, PS_SERVICE_CHECKPOINT_SECONDS, PS_SERVICE_CHECKPOINT_LOG_BYTES, PS_IDLE_CHECKPOINT_AFTER,
//   PS_DIVERGENCE (QuarantineSession|FailStop)
//   PS_MAX_BUFFERED_REPLY_BYTES, PS_SESSION_MEMORY_BUDGET_BYTES, PS_UNUSED_SESSION_SECONDS, PS_MAX_SESSIONS,
//   PS_MAX_SESSIONS_PER_ADDRESS, PS_LOG_PAGE_SIZE_BITS
//   PS_REPLY_TIMEOUT_MS      PersistentServicesOptions.ReplyTimeout
//   PERSISTENTSERVICES_CRASH_POINT, PERSISTENTSERVICES_CRASH_AFTER   a crash point of the service (CrashPoints, armed by the library from the configuration) and the hits
//                            to let pass first (docs/checkpoints.md)
//   PS_INSTANCE_ORDINAL      PersistentServicesOptions.InstanceOrdinal (one instance of several behind the gateway)
//   PS_REPLICATION           Replication.Role (Primary | Replica), with PS_REPLICAS (comma-separated base addresses of the
//                            other nodes), PS_TERM, PS_REQUIRED_REPLICAS (docs/replication.md; PS_PEER_KEY signs shipments);
//                            PS_FAILOVER (Manual | Raft), PS_ADDRESS (this node's base address), PS_INITIAL_PRIMARY, PS_WITNESSES,
//                            PS_ANONYMOUS_STATUS=1 (Replication.AnonymousStatus: GET /ps/replication/status unsigned),
//                            PS_ELECTION_TIMEOUT_MS (PS_REPLICATION=None with PS_INITIAL_PRIMARY: the role from the initial primary),
//                            PS_SWITCHOVER_TIMEOUT_MS (Replication.SwitchoverTimeout)
//   PersistentServices__Log__Encryption__Key (and __PreviousKeys__0, ...)  the log's encryption keys, bound from
//                            configuration as docs/operations.md shows (an environment variable from a Kubernetes Secret)
//   PersistentServices__Calls__ReplicationGroups__0__0 (and __0__1, ...)  the replication groups its calls follow
//                            (PersistentCallOptions.ReplicationGroups), bound from configuration as docs/calls.md shows
//   PS_CALLEE_CLIENT_TIMEOUT_MS  the callee client's HttpClient.Timeout, set after AddPersistentCalls() (an application's
//                            own timeout, shorter than a callee's outage: a persistent call must not end with it)
//   (PERSISTENTSERVICES_REPLAY_CHECK, set by psctl replay-check, makes it recover a sandbox's copy of its log instead)
var builder = WebApplication.CreateBuilder(args);
builder.Logging.SetMinimumLevel(LogLevel.Information);
builder.Logging.AddSimpleConsole(console => console.TimestampFormat = "HH:mm:ss.fff ");
var faultFile = Environment.GetEnvironmentVariable("PS_FAULT_FILE");
builder.Services.AddPersistentServices(options =>
{
    options.LogDirectory = Environment.GetEnvironmentVariable("PS_LOG_DIR") ?? throw new InvalidOperationException("PS_LOG_DIR is required");
    builder.Configuration.GetSection("PersistentServices:Log:Encryption").Bind(options.Log.Encryption);
    if (Environment.GetEnvironmentVariable("PS_REPLAY_PARALLELISM") is { Length: > 0 } parallelism)
    {
        options.ReplayParallelism = int.Parse(parallelism, System.Globalization.CultureInfo.InvariantCulture);
    }

    if (Environment.GetEnvironmentVariable("PS_SESSION_CHECKPOINT_BYTES") is { Length: > 0 } sessionBytes)
    {
        options.SessionCheckpointBytes = int.Parse(sessionBytes, System.Globalization.CultureInfo.InvariantCulture);
    }

    if (Environment.GetEnvironmentVariable("PS_SERVICE_CHECKPOINT_SECONDS") is { Length: > 0 } seconds)
    {
        options.ServiceCheckpointInterval = TimeSpan.FromSeconds(double.Parse(seconds, System.Globalization.CultureInfo.InvariantCulture));
    }

    if (Environment.GetEnvironmentVariable("PS_SERVICE_CHECKPOINT_LOG_BYTES") is { Length: > 0 } logBytes)
    {
        options.ServiceCheckpointLogBytes = long.Parse(logBytes, System.Globalization.CultureInfo.InvariantCulture);
    }

    if (Environment.GetEnvironmentVariable("PS_IDLE_CHECKPOINT_AFTER") is { Length: > 0 } idle)
    {
        options.IdleCheckpointAfter = int.Parse(idle, System.Globalization.CultureInfo.InvariantCulture);
    }

    if (Environment.GetEnvironmentVariable("PS_DIVERGENCE") is { Length: > 0 } divergence)
    {
        options.OnDivergence = Enum.Parse<DivergencePolicy>(divergence);
    }

    if (Environment.GetEnvironmentVariable("PS_MAX_BUFFERED_REPLY_BYTES") is { Length: > 0 } replyBytes)
    {
        options.MaxBufferedReplyBytes = int.Parse(replyBytes, System.Globalization.CultureInfo.InvariantCulture);
    }

    if (Environment.GetEnvironmentVariable("PS_SESSION_MEMORY_BUDGET_BYTES") is { Length: > 0 } budget)
    {
        options.SessionMemoryBudgetBytes = long.Parse(budget, System.Globalization.CultureInfo.InvariantCulture);
    }

    if (Environment.GetEnvironmentVariable("PS_LOG_PAGE_SIZE_BITS") is { Length: > 0 } pageBits)
    {
        // Small log pages (a long log in few bytes): requests and held replies shrink to fit half a page.
        options.Log.PageSizeBits = int.Parse(pageBits, System.Globalization.CultureInfo.InvariantCulture);
        options.MaxRequestBodyBytes = options.Log.PageSize / 4;
        options.MaxLoggedHeaderBytes = options.Log.PageSize / 8;
        options.MaxBufferedReplyBytes = options.Log.PageSize / 8;
    }

    if (Environment.GetEnvironmentVariable("PS_UNUSED_SESSION_SECONDS") is { Length: > 0 } unused)
    {
        options.UnusedSessionRetention = TimeSpan.FromSeconds(double.Parse(unused, System.Globalization.CultureInfo.InvariantCulture));
    }

    if (Environment.GetEnvironmentVariable("PS_MAX_SESSIONS") is { Length: > 0 } maxSessions)
    {
        options.MaxSessions = int.Parse(maxSessions, System.Globalization.CultureInfo.InvariantCulture);
        options.MaxSessionsPerAddress = options.MaxSessions; // the tests' clients all come from 127.0.0.1
    }

    if (Environment.GetEnvironmentVariable("PS_MAX_SESSIONS_PER_ADDRESS") is { Length: > 0 } perAddress)
    {
        options.MaxSessionsPerAddress = int.Parse(perAddress, System.Globalization.CultureInfo.InvariantCulture);
    }

    if (Environment.GetEnvironmentVariable("PS_SERVICE_NAME") is { Length: > 0 } name)
    {
        options.ServiceName = name;
    }

    if (Environment.GetEnvironmentVariable("PS_INSTANCE_ORDINAL") is { Length: > 0 } ordinal)
    {
        options.InstanceOrdinal = int.Parse(ordinal, System.Globalization.CultureInfo.InvariantCulture);
    }

    if (Environment.GetEnvironmentVariable("PS_REPLY_TIMEOUT_MS") is { Length: > 0 } replyTimeout)
    {
        options.ReplyTimeout = TimeSpan.FromMilliseconds(int.Parse(replyTimeout, System.Globalization.CultureInfo.InvariantCulture));
    }

    options.Calls.PeerKey = Environment.GetEnvironmentVariable("PS_PEER_KEY");

    // The replication groups its calls follow, bound from configuration as docs/calls.md shows.
    builder.Configuration.GetSection("PersistentServices:Calls:ReplicationGroups").Bind(options.Calls.ReplicationGroups);
    if (Environment.GetEnvironmentVariable("PS_LEGACY_SIGNATURES") is { Length: > 0 } legacy)
    {
        options.Calls.LegacySignatures = Enum.Parse<LegacySignatures>(legacy);
    }

    options.Calls.RetryDelay = TimeSpan.FromMilliseconds(50);
    options.Calls.MaxRetryDelay = TimeSpan.FromMilliseconds(500);
    if (Environment.GetEnvironmentVariable("PS_DOMAIN") is { Length: > 0 } domain)
    {
        foreach (var member in domain.Split(','))
        {
            var parts = member.Split('=', 2);
            options.Domain.Members[parts[0]] = new Uri(parts[1]);
        }

        options.Domain.FlushTimeout = TimeSpan.FromSeconds(2);
    }

    if (Environment.GetEnvironmentVariable("PS_REPLICATION") is { Length: > 0 } role)
    {
        options.Replication.Role = Enum.Parse<ReplicationRole>(role, ignoreCase: true);
        foreach (var replica in (Environment.GetEnvironmentVariable("PS_REPLICAS") ?? "").Split(',', StringSplitOptions.RemoveEmptyEntries))
        {
            options.Replication.Replicas.Add(new Uri(replica));
        }

        if (Environment.GetEnvironmentVariable("PS_TERM") is { Length: > 0 } term)
        {
            options.Replication.Term = long.Parse(term, System.Globalization.CultureInfo.InvariantCulture);
        }

        if (Environment.GetEnvironmentVariable("PS_REQUIRED_REPLICAS") is { Length: > 0 } required)
        {
            options.Replication.RequiredReplicas = int.Parse(required, System.Globalization.CultureInfo.InvariantCulture);
        }

        options.Replication.RetryInterval = TimeSpan.FromMilliseconds(50);
        if (Environment.GetEnvironmentVariable("PS_FAILOVER") is { Length: > 0 } failover)
        {
            options.Replication.Failover = Enum.Parse<FailoverMode>(failover, ignoreCase: true);
        }

        // A node's status to unsigned requests too (benchmarks/replication's scripts poll it with curl).
        options.Replication.AnonymousStatus = Environment.GetEnvironmentVariable("PS_ANONYMOUS_STATUS") == "1";

        if (Environment.GetEnvironmentVariable("PS_ADDRESS") is { Length: > 0 } address)
        {
            options.Replication.Address = new Uri(address);
        }

        if (Environment.GetEnvironmentVariable("PS_INITIAL_PRIMARY") is { Length: > 0 } initialPrimary)
        {
            options.Replication.InitialPrimary = new Uri(initialPrimary);
        }

        foreach (var witness in (Environment.GetEnvironmentVariable("PS_WITNESSES") ?? "").Split(',', StringSplitOptions.RemoveEmptyEntries))
        {
            options.Replication.Witnesses.Add(new Uri(witness));
        }

        if (Environment.GetEnvironmentVariable("PS_ELECTION_TIMEOUT_MS") is { Length: > 0 } election)
        {
            options.Replication.ElectionTimeout = TimeSpan.FromMilliseconds(int.Parse(election, System.Globalization.CultureInfo.InvariantCulture));
        }

        if (Environment.GetEnvironmentVariable("PS_SWITCHOVER_TIMEOUT_MS") is { Length: > 0 } switchover)
        {
            options.Replication.SwitchoverTimeout = TimeSpan.FromMilliseconds(int.Parse(switchover, System.Globalization.CultureInfo.InvariantCulture));
        }
    }

    if (Environment.GetEnvironmentVariable("PS_CALL_LOGGING") is { Length: > 0 } callLogging)
    {
        options.Calls.Logging = Enum.Parse<CallLogging>(callLogging);
    }

    if (faultFile is { Length: > 0 })
    {
        options.Log.DeviceFactory = (basePath, io) => new FullDiskDevice(DurableLog.CreateDefaultDevice(basePath, io), faultFile);
    }
});

builder.Services.AddSingleton<Tally>();
var bankClient = Environment.GetEnvironmentVariable("PS_CALLEE_NAME") ?? "bank"; // in a domain: the member's name
var bankBuilder = builder.Services.AddHttpClient(bankClient, client => client.BaseAddress = new Uri(Environment.GetEnvironmentVariable("PS_CALLEE_URL") ?? "http://127.0.0.1:9"))
    .AddPersistentCalls(Environment.GetEnvironmentVariable("PS_CALLEE_SERVICE") is { Length: > 0 } calleeService ? calleeService : bankClient);
if (Environment.GetEnvironmentVariable("PS_CALLEE_CLIENT_TIMEOUT_MS") is { Length: > 0 } clientTimeout)
{
    bankBuilder.ConfigureHttpClient(client => client.Timeout = TimeSpan.FromMilliseconds(int.Parse(clientTimeout, System.Globalization.CultureInfo.InvariantCulture)));
}

var secondBank = Environment.GetEnvironmentVariable("PS_CALLEE2_NAME");
if (secondBank is { Length: > 0 })
{
    builder.Services.AddHttpClient(secondBank, client => client.BaseAddress = new Uri(Environment.GetEnvironmentVariable("PS_CALLEE2_URL")!))
        .AddPersistentCalls();
}

var app = builder.Build();
var refuseFlushFile = Environment.GetEnvironmentVariable("PS_REFUSE_FLUSH_FILE");
if (refuseFlushFile is { Length: > 0 })
{
    app.Use((context, next) =>
    {
        if (context.Request.Path == "/ps/domain/flush" && File.Exists(refuseFlushFile))
        {
            Console.Error.WriteLine("refusing a distributed flush (PS_REFUSE_FLUSH_FILE)");
            context.Response.StatusCode = StatusCodes.Status503ServiceUnavailable;
            return Task.CompletedTask;
        }

        return next(context);
    });
}

// PS_REFUSE_RECOVERED_FILE: while this file exists, a member's recovered state numbers told to this service
// (POST /ps/domain/recovered) get 503, as when the broadcast is lost; asking for them (GET) still works.
var refuseRecoveredFile = Environment.GetEnvironmentVariable("PS_REFUSE_RECOVERED_FILE");
if (refuseRecoveredFile is { Length: > 0 })
{
    app.Use((context, next) =>
    {
        if (context.Request.Path == "/ps/domain/recovered" && HttpMethods.IsPost(context.Request.Method) && File.Exists(refuseRecoveredFile))
        {
            Console.Error.WriteLine("refusing a member's recovered state numbers (PS_REFUSE_RECOVERED_FILE)");
            context.Response.StatusCode = StatusCodes.Status503ServiceUnavailable;
            return Task.CompletedTask;
        }

        return next(context);
    });
}

// Behind ps-gateway (GatewayTests) a client's address comes in X-Forwarded-For, trusted from loopback only (the default).
app.UseForwardedHeaders(new ForwardedHeadersOptions { ForwardedHeaders = Microsoft.AspNetCore.HttpOverrides.ForwardedHeaders.XForwardedFor });
app.UsePersistentServices();

var balances = new SharedMap<string, long>("Test.Balances");
var accounts = new SharedVariable<string[]>("Test.Accounts");

// Deposits into shared balances; the read-only twin shows them. Version 2 answers with one more field.
var version = Environment.GetEnvironmentVariable("PS_VERSION") ?? "1";
app.MapPost("/deposit", [Persistent] (Deposit body) =>
{
    accounts.Update(known => known is null ? [body.Account] : known.Contains(body.Account) ? known : [.. known, body.Account]);
    var balance = balances.Update(body.Account, b => b + body.Amount);
    return version == "2"
        ? Results.Ok(new { account = body.Account, balance, version = 2 })
        : Results.Ok(new { account = body.Account, balance });
});

// Session state: a per-session tally (recovered by replay or from a checkpoint).
app.MapPost("/tally", [Persistent] (Deposit body, Tally tally) =>
{
    tally.Count += body.Amount;
    tally.Ops = (tally.Ops ?? []).Add(body.Account);
    return Results.Ok(new { count = tally.Count, ops = tally.Ops.Count });
});
// A reply of any size (a catalog page): bytes that depend only on the op id, the session's tally and the size, so a
// replay reproduces them and a client can check every byte of a retried reply.
app.MapPost("/page", [Persistent] (Page body, Tally tally) =>
{
    tally.Count += 1;
    return Results.Bytes(Page.Content(body.OpId, tally.Count, body.Size), "application/octet-stream");
});
app.MapGet("/tally", [PersistentReadOnly] (Tally tally) => Results.Ok(new { count = tally.Count, ops = tally.Ops?.Count ?? 0 }));
// Every byte of the tally's ops, as a SHA-256 (a session state larger than a log record is checked whole).
app.MapGet("/tally/digest", [PersistentReadOnly] (Tally tally) => Results.Ok(new
{
    count = tally.Count,
    ops = tally.Ops?.Count ?? 0,
    sha256 = Convert.ToHexString(System.Security.Cryptography.SHA256.HashData(System.Text.Encoding.UTF8.GetBytes(string.Join("\n", tally.Ops ?? [])))),
}));

#pragma warning disable PS0201 // deliberately nondeterministic: the divergence tests need an endpoint whose replay differs
app.MapPost("/now", [Persistent] () => Results.Ok(new { now = DateTime.UtcNow.Ticks }));
#pragma warning restore PS0201

// The beginner's mistake of issue 14: a plain static counter in persistent code. Live it counts across sessions; after
// kill -9 the sessions replay in another interleaving, get other numbers, and diverge. The replay check must find it.
// /k-shared: the same counter written to a shared variable, with a constant reply (a difference in state, not in the reply).
var lastK = new SharedVariable<long>("Test.LastK");
#pragma warning disable PS0102 // deliberately unlogged state: the replay check tests need endpoints whose replay diverges
app.MapPost("/k", [Persistent] () => new { n = ++Plain.Counter });
app.MapPost("/k-shared", [Persistent] () =>
{
    lastK.Write(++Plain.Counter);
    return Results.Ok(new { written = true });
});
#pragma warning restore PS0102

// A request that takes a while (a graceful drain waits for it).
app.MapPost("/slow", [Persistent] async (Deposit body) =>
{
    await Task.Delay(TimeSpan.FromMilliseconds(body.Amount));
    return Results.Ok(new { slept = body.Amount });
});
app.MapGet("/balances", [PersistentReadOnly] () => Results.Ok((accounts.Read() ?? []).ToDictionary(a => a, balances.Get)));

// Test-only: how many DV entries the calling session and the shared variable Test.Accounts carry (a service's own
// entries of earlier epochs must not pile up with every restart). Read-only: nothing logged, no entry added.
app.MapGet("/debug/dv", [PersistentReadOnly] () => Results.Ok(new
{
    session = PersistentServices.Sessions.PersistentScope.Current?.Session?.Dv.Entries.Count,
    accounts = PersistentServices.SharedState.SharedStateStore.RequireCurrent("Test.Accounts").Cell("Test.Accounts").Dv.Entries.Count,
}));

// A reply whose OnStarting callback throws: an endpoint failure (500), like plain ASP.NET Core.
app.MapPost("/onstarting-throws", [Persistent] (HttpContext context) =>
{
    context.Response.OnStarting(() => throw new InvalidOperationException("OnStarting callback failed"));
    return Results.Ok(new { ok = true });
});

// Appends a notification line after its reply went to the client.
var notifyFile = Environment.GetEnvironmentVariable("PS_NOTIFY_FILE");
app.MapPost("/notify", [Persistent] (HttpContext context, Note body) =>
{
    context.Response.OnCompleted(() =>
    {
        if (notifyFile is { Length: > 0 })
        {
            File.AppendAllText(notifyFile, body.Text + "\n"); // OnCompleted callbacks never run in replay: no PS0202

        }

        return Task.CompletedTask;
    });
    return Results.Ok(new { text = body.Text });
});

// An OnCompleted callback that throws: harmless live, and never stops recovery.
app.MapPost("/oncompleted-throws", [Persistent] (HttpContext context) =>
{
    context.Response.OnCompleted(() => throw new InvalidOperationException("OnCompleted callback failed"));
    return Results.Ok(new { ok = true });
});

// Chained shared updates: update 'from', then update 'to'. With PS_BLOCK_CHAIN=1 it blocks inside the first update
// (its read for update is logged, its write is not: it holds the variable) until the process is killed.
var blockChain = Environment.GetEnvironmentVariable("PS_BLOCK_CHAIN") == "1";
var blocked = new ConcurrentDictionary<string, bool>();
app.MapPost("/chain", [Persistent] (Chain body) =>
{
    var from = new SharedVariable<long>("Test.Chain." + body.From);
    var to = new SharedVariable<long>("Test.Chain." + body.To);
    var a = from.Update(v =>
    {
        if (blockChain)
        {
#pragma warning disable PS0102 // test instrumentation: which requests reached their crash point
            blocked[body.From] = true;
#pragma warning restore PS0102
            Thread.Sleep(Timeout.Infinite);
        }

        return v + 1;
    });
    var b = to.Update(v => v + 10);
    return Results.Ok(new { from = a, to = b });
});
app.MapGet("/chain/blocked", () => Results.Ok(blocked.Count));
app.MapGet("/chain/values", [PersistentReadOnly] () => Results.Ok(new[] { "x", "y", "z", "w" }.ToDictionary(n => n, n => new SharedVariable<long>("Test.Chain." + n).Read())));

// Calls between services. The callee side: a credit applied once per call, counted per operation id (a duplicate
// execution would count 2), a read-only balance and a functional fee.
var credits = new SharedMap<string, int>("Test.Bank.Credits");
var bankBalance = new SharedVariable<long>("Test.Bank.Balance");
var dieAfterCredit = Environment.GetEnvironmentVariable("PS_DIE_AFTER_CREDIT") == "1";
var relay = Environment.GetEnvironmentVariable("PS_RELAY") == "1";
#pragma warning disable PS0202 // the relay's client has AddPersistentCalls(): logged, deduplicated calls
app.MapPost("/bank/credit", [Persistent] async (Deposit body, HttpContext context, IHttpClientFactory clients) =>
{
    credits.Update(body.Account, n => n + 1);
    if (relay)
    {
        // PS_RELAY=1: this bank passes every credit on to its own callee (a chain of three services).
        var onward = await clients.CreateClient(bankClient).PostAsJsonAsync("/bank/credit", body);
        onward.EnsureSuccessStatusCode();
    }

    if (dieAfterCredit)
    {
        context.Response.OnCompleted(() =>
        {
            Console.Error.WriteLine("dying after the credit's reply (PS_DIE_AFTER_CREDIT)");
            System.Diagnostics.Process.GetCurrentProcess().Kill();
            return Task.CompletedTask;
        });
    }

    return Results.Ok(new { balance = bankBalance.Update(b => b + body.Amount) });
});
#pragma warning restore PS0202
app.MapGet("/bank/balance", [PersistentReadOnly] () => Results.Ok(new { balance = bankBalance.Read() }));
app.MapGet("/bank/credits/{op}", [PersistentReadOnly] (string op) => Results.Ok(new { count = credits.Get(op) }));
app.MapPost("/bank/fee", [Functional] (Deposit body) => Results.Ok(new { fee = body.Amount / 10 }));

// The caller side: a payment counts itself per operation id and adds its amount to the payer's total (shared state of
// the caller, as a debit: a second execution would count 2), asks the bank for a fee (functional), credits it
// (persistent), reads the balance (read-only), and keeps a tally in its session state.
var payments = new SharedMap<string, int>("Test.Pay.Executions");
var paidTotal = new SharedVariable<long>("Test.Pay.Total");
#pragma warning disable PS0202 // the "bank" client has AddPersistentCalls(): logged, deduplicated calls
app.MapPost("/pay", [Persistent] async (Deposit body, Tally tally, IHttpClientFactory clients, bool? light) =>
{
    payments.Update(body.Account, n => n + 1);
    paidTotal.Update(t => t + body.Amount);
    var bank = clients.CreateClient(bankClient);
    var fee = (await (await bank.PostAsJsonAsync("/bank/fee", body)).Content.ReadFromJsonAsync<System.Text.Json.JsonElement>()).GetProperty("fee").GetInt64();
    var credit = await bank.PostAsJsonAsync("/bank/credit", body with { Amount = body.Amount - fee });
    credit.EnsureSuccessStatusCode();
    var balance = (await credit.Content.ReadFromJsonAsync<System.Text.Json.JsonElement>()).GetProperty("balance").GetInt64();
    if (secondBank is { Length: > 0 })
    {
        // PS_CALLEE2_NAME: a fan-out; the second member is credited too (its balance is not in the reply).
        (await clients.CreateClient(secondBank).PostAsJsonAsync("/bank/credit", body with { Amount = body.Amount - fee })).EnsureSuccessStatusCode();
    }

    // ?light=true skips the read-only call (a test that needs nothing to touch the callee after the credit).
    var seen = light == true ? balance : (await bank.GetFromJsonAsync<System.Text.Json.JsonElement>("/bank/balance")).GetProperty("balance").GetInt64();
    tally.Count += 1;
    return Results.Ok(new { op = body.Account, fee, balance, seen, payments = tally.Count });
});

app.MapGet("/pay/count/{op}", [PersistentReadOnly] (string op) => Results.Ok(new { count = payments.Get(op) }));
app.MapGet("/pay/total", [PersistentReadOnly] () => Results.Ok(new { total = paidTotal.Read() }));

app.MapHealthChecks("/health/ready");
app.Run();

internal sealed record Deposit(string Account, long Amount);

/// <summary>Per-session state (a singleton service: each session sees its own values).</summary>
internal sealed partial class Tally
{
    [SessionState]
    public partial long Count { get; set; }

    [SessionState]
    public partial System.Collections.Immutable.ImmutableList<string>? Ops { get; set; }
}

internal sealed record Note(string Text);

internal sealed record Page(string OpId, int Size)
{
    /// <summary>xorshift64 from a hash of the inputs: the same bytes in every process (the tests compute them too).</summary>
    public static byte[] Content(string opId, long count, int size)
    {
        var bytes = new byte[size];
        var state = BitConverter.ToUInt64(System.Security.Cryptography.SHA256.HashData(System.Text.Encoding.UTF8.GetBytes(opId + "/" + count))) | 1;
        for (var i = 0; i < size; i++)
        {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            bytes[i] = (byte)state;
        }

        return bytes;
    }
}

/// <summary>Plain static state, never logged (see /k).</summary>
internal static class Plain
{
    public static long Counter;
}

internal sealed record Chain(string From, string To);

/// <summary>A log device that fails every write with ENOSPC while a trigger file exists (a disk that filled up).</summary>
internal sealed class FullDiskDevice(IDevice inner, string triggerFile) : DelegatingDevice(inner)
{
    private const uint Enospc = 28;

    public override void WriteAsync(IntPtr sourceAddress, int segmentId, ulong destinationAddress, uint numBytesToWrite, DeviceIOCompletionCallback callback, object context)
    {
        if (File.Exists(triggerFile))
        {
            callback(Enospc, 0, context);
            return;
        }

        base.WriteAsync(sourceAddress, segmentId, destinationAddress, numBytesToWrite, callback, context);
    }
}
