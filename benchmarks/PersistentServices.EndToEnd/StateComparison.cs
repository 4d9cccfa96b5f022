using System.Collections.Concurrent;
using System.Diagnostics;
using System.Globalization;
using System.Net;
using System.Net.Sockets;
using System.Text;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Hosting;
using Microsoft.AspNetCore.Http;
using Microsoft.Data.Sqlite;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Logging;
using PersistentServices.Hosting;
using PersistentServices.SharedState;
using StackExchange.Redis;

namespace PersistentServices.EndToEnd;

/// <summary>
/// The state comparison ([MSP §5]'s configurations): an endpoint doing 0, 1 or 4 read+write of state per request,
/// with the state in PersistentServices shared variables ([Persistent] endpoint: logged, exactly once, recovered from the
/// log), in a durable SQLite row per variable (a plain endpoint: "Psession", one transaction per request, WAL with
/// synchronous=FULL) and in Redis (a plain endpoint: "StateServer", in memory, not durable).
/// </summary>
internal static class StateComparison
{
    private static readonly SharedVariable<long>[] Variables = [.. Enumerable.Range(0, 4).Select(i => new SharedVariable<long>($"Bench.Counter{i}"))];

    public static async Task RunAsync(int seconds, int[] sessionCounts)
    {
        var root = Path.Combine(Path.GetTempPath(), "ps-state-" + Guid.NewGuid().ToString("N")[..8]);
        Directory.CreateDirectory(root);
        using var redis = RedisServer.Start(6399);
        var sqlite = new SqliteCounters(Path.Combine(root, "state.db"));
        using var pool = await ConnectionMultiplexer.ConnectAsync("127.0.0.1:6399");

        var builder = WebApplication.CreateBuilder();
        builder.WebHost.UseUrls("http://127.0.0.1:0");
        builder.Logging.ClearProviders();
        builder.Services.AddPersistentServices(o => o.LogDirectory = Path.Combine(root, "log"));
        var app = builder.Build();
        app.UsePersistentServices();
        app.MapPost("/shared/{n:int}", [Persistent] (int n) =>
        {
            long last = 0;
            for (var i = 0; i < n; i++)
            {
                last = Variables[i].Update(v => v + 1);
            }

            return Results.Ok(new { last });
        });
        app.MapPost("/sqlite/{n:int}", (int n) => Results.Ok(new { last = sqlite.Increment(n) }));
        app.MapPost("/redis/{n:int}", async (int n) =>
        {
            var db = pool.GetDatabase();
            long last = 0;
            for (var i = 0; i < n; i++)
            {
                last = ((long?)await db.StringGetAsync($"counter{i}") ?? 0) + 1;
                await db.StringSetAsync($"counter{i}", last);
            }

            return Results.Ok(new { last });
        });
        await app.StartAsync();
        var runtime = app.Services.GetRequiredService<PersistentRuntime>();

        Console.WriteLine($"- server: in-process Kestrel on {app.Urls.First()}; SQLite (WAL, synchronous=FULL) in {root}; redis-server {redis.Version} on 127.0.0.1:6399 (no persistence)");
        Console.WriteLine($"- {seconds} s per cell after 2 s warm-up; each request does n read+write of n different counters (shared: SharedVariable.Update; SQLite: SELECT+UPDATE in one transaction; Redis: GET+SET)");
        Console.WriteLine();
        Console.WriteLine("| state kept in | read+write per request | sessions | requests/s | p50 (ms) | p99 (ms) | log bytes per request | log forces per request |");
        Console.WriteLine("|---|---:|---:|---:|---:|---:|---:|---:|");
        foreach (var sessions in sessionCounts)
        {
            foreach (var (kind, label) in new[] { ("shared", "shared variables ([Persistent])"), ("sqlite", "SQLite row (plain endpoint)"), ("redis", "Redis (plain endpoint)") })
            {
                foreach (var n in new[] { 0, 1, 4 })
                {
                    var result = await LoadRun.RunAsync(app.Urls.First(), $"/{kind}/{n}", kind == "shared", sessions, TimeSpan.FromSeconds(seconds), runtime);
                    var bytes = result.LogBytesPerRequest;
                    Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
                        $"| {label} | {n} | {sessions} | {result.RequestsPerSecond:N0} | {result.P50:F3} | {result.P99:F3} | {bytes:N0} | {result.ForcesPerRequest:F3} |"));
                }
            }
        }

        await app.StopAsync();
        await app.DisposeAsync();
        sqlite.Dispose();
        Directory.Delete(root, recursive: true);
    }

    /// <summary>Counters in a SQLite database, one row each, updated in one durable transaction per request.</summary>
    private sealed class SqliteCounters : IDisposable
    {
        private readonly string _connectionString;

        public SqliteCounters(string path)
        {
            _connectionString = new SqliteConnectionStringBuilder { DataSource = path, Pooling = true, DefaultTimeout = 60 }.ToString();
            using var connection = Open();
            Execute(connection, "PRAGMA journal_mode=WAL;");
            Execute(connection, "CREATE TABLE counters (id INTEGER PRIMARY KEY, value INTEGER NOT NULL);");
            for (var i = 0; i < 4; i++)
            {
                Execute(connection, $"INSERT INTO counters VALUES ({i}, 0);");
            }
        }

        public long Increment(int n)
        {
            if (n == 0)
            {
                return 0;
            }

            using var connection = Open();
            using var transaction = connection.BeginTransaction(deferred: false);
            long last = 0;
            for (var i = 0; i < n; i++)
            {
                using var read = connection.CreateCommand();
                read.Transaction = transaction;
                read.CommandText = "SELECT value FROM counters WHERE id = $id";
                read.Parameters.AddWithValue("$id", i);
                last = (long)read.ExecuteScalar()! + 1;
                using var write = connection.CreateCommand();
                write.Transaction = transaction;
                write.CommandText = "UPDATE counters SET value = $value WHERE id = $id";
                write.Parameters.AddWithValue("$value", last);
                write.Parameters.AddWithValue("$id", i);
                write.ExecuteNonQuery();
            }

            transaction.Commit();
            return last;
        }

        public void Dispose() => SqliteConnection.ClearAllPools();

        private SqliteConnection Open()
        {
            var connection = new SqliteConnection(_connectionString);
            connection.Open();
            Execute(connection, "PRAGMA synchronous=FULL;");
            return connection;
        }

        private static void Execute(SqliteConnection connection, string sql)
        {
            using var command = connection.CreateCommand();
            command.CommandText = sql;
            command.ExecuteNonQuery();
        }
    }
}
