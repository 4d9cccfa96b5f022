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

namespace PersistentServices.EndToEnd;

/// <summary>
/// Issue 5's comparison (seed 000 §5's configurations): an endpoint doing 0, 1 or 4 read+write of state per request,
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
        var pool = new RedisPool(6399);

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
        app.MapPost("/redis/{n:int}", async (int n) => Results.Ok(new { last = await pool.IncrementAsync(n) }));
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
        pool.Dispose();
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

    /// <summary>A redis-server child process on loopback, without persistence (an in-memory state server).</summary>
    private sealed class RedisServer : IDisposable
    {
        private readonly Process _process;

        private RedisServer(Process process, string version)
        {
            _process = process;
            Version = version;
        }

        public string Version { get; }

        public static RedisServer Start(int port)
        {
            var process = Process.Start(new ProcessStartInfo("redis-server", $"--port {port} --bind 127.0.0.1 --save \"\" --appendonly no")
            {
                RedirectStandardOutput = true,
                UseShellExecute = false,
            }) ?? throw new InvalidOperationException("redis-server did not start (apt-get install redis-server)");
            for (var i = 0; i < 100; i++)
            {
                try
                {
                    using var client = new TcpClient("127.0.0.1", port);
                    break;
                }
                catch (SocketException)
                {
                    Thread.Sleep(50);
                }
            }

            var version = Process.Start(new ProcessStartInfo("redis-server", "--version") { RedirectStandardOutput = true })!.StandardOutput.ReadToEnd().Split(' ').FirstOrDefault(p => p.StartsWith("v=", StringComparison.Ordinal)) ?? "?";
            return new RedisServer(process, version);
        }

        public void Dispose()
        {
            _process.Kill();
            _process.WaitForExit();
            _process.Dispose();
        }
    }

    /// <summary>
    /// Pooled connections speaking just enough RESP2 for GET and SET (StackExchange.Redis does not restore from the
    /// registry copy; this benchmark-only client is not a general Redis client).
    /// </summary>
    private sealed class RedisPool(int port) : IDisposable
    {
        private readonly ConcurrentBag<Connection> _idle = [];

        public async Task<long> IncrementAsync(int n)
        {
            if (!_idle.TryTake(out var connection))
            {
                connection = new Connection(port);
            }

            long last = 0;
            for (var i = 0; i < n; i++)
            {
                var value = await connection.CommandAsync("GET", $"counter{i}");
                last = (value is null ? 0 : long.Parse(value, CultureInfo.InvariantCulture)) + 1;
                await connection.CommandAsync("SET", $"counter{i}", last.ToString(CultureInfo.InvariantCulture));
            }

            _idle.Add(connection);
            return last;
        }

        public void Dispose()
        {
            foreach (var connection in _idle)
            {
                connection.Dispose();
            }
        }

        private sealed class Connection : IDisposable
        {
            private readonly TcpClient _client;
            private readonly NetworkStream _stream;
            private readonly StreamReader _reader;

            public Connection(int port)
            {
                _client = new TcpClient("127.0.0.1", port) { NoDelay = true };
                _stream = _client.GetStream();
                _reader = new StreamReader(_stream, Encoding.ASCII);
            }

            public async Task<string?> CommandAsync(params string[] parts)
            {
                var request = new StringBuilder().Append('*').Append(parts.Length).Append("\r\n");
                foreach (var part in parts)
                {
                    request.Append('$').Append(Encoding.UTF8.GetByteCount(part)).Append("\r\n").Append(part).Append("\r\n");
                }

                await _stream.WriteAsync(Encoding.UTF8.GetBytes(request.ToString()));
                var line = await _reader.ReadLineAsync() ?? throw new IOException("redis closed the connection");
                switch (line[0])
                {
                    case '+':
                        return line[1..];
                    case '$' when line == "$-1":
                        return null;
                    case '$':
                        return await _reader.ReadLineAsync();
                    default:
                        throw new IOException("redis: " + line);
                }
            }

            public void Dispose() => _client.Dispose();
        }
    }
}
