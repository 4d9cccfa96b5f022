using Microsoft.CodeAnalysis;
using PersistentServices.Generators.Tests.TestSupport;

namespace PersistentServices.Generators.Tests;

/// <summary>PS0202: external input (HTTP, files, databases, sockets) and process facts in persistent code.</summary>
public sealed class ExternalInputTests
{
    private const string Usings = """
        using System.Data;
        using System.Data.Common;
        using System.Diagnostics;
        using System.Diagnostics.CodeAnalysis;
        using System.IO;
        using System.Net;
        using System.Net.Http;
        using System.Net.Http.Json;
        using System.Net.Sockets;
        using System.Threading;
        using System.Threading.Tasks;
        using Microsoft.Extensions.Logging;

        namespace App;

        """;

    private const string Http = "calls another service through a client without AddPersistentCalls(): a replayed request sends the call again, and the answer may differ (and the other service may apply it twice); register the client with .AddPersistentCalls() (docs/calls.md)";
    private const string Files = "reads or writes the file system: a replayed request does it again, and the files may have changed since";
    private const string Database = "talks to a database: a replayed request runs the command again, and the data may have changed since (or a change is applied twice)";
    private const string Network = "uses the network: a replayed request sends and receives again, and the answers may differ";
    private const string Process = "is a fact of the running process: it differs after a restart, so a replayed request would see a different value";

    public static TheoryData<string, string, string, string> Reported => new()
    {
        { "http.GetAsync(\"http://127.0.0.1:9/\")", "http.GetAsync(\"http://127.0.0.1:9/\")", "HttpClient.GetAsync()", Http },
        { "http.SendAsync(new HttpRequestMessage())", "http.SendAsync(new HttpRequestMessage())", "HttpClient.SendAsync()", Http },
        { "invoker.SendAsync(new HttpRequestMessage(), CancellationToken.None)", "invoker.SendAsync(new HttpRequestMessage(), CancellationToken.None)", "HttpMessageInvoker.SendAsync()", Http },
        { "http.PostAsJsonAsync(\"/x\", 1)", "http.PostAsJsonAsync(\"/x\", 1)", "HttpClient.PostAsJsonAsync()", Http },
        { "http.GetFromJsonAsync<int>(\"/x\")", "http.GetFromJsonAsync<int>(\"/x\")", "HttpClient.GetFromJsonAsync()", Http },
        { "File.ReadAllText(\"a.txt\")", "File.ReadAllText(\"a.txt\")", "File.ReadAllText()", Files },
        { "File.Exists(\"a.txt\")", "File.Exists(\"a.txt\")", "File.Exists()", Files },
        { "Directory.GetFiles(\".\")", "Directory.GetFiles(\".\")", "Directory.GetFiles()", Files },
        { "new FileStream(\"a.txt\", FileMode.Open)", "new FileStream(\"a.txt\", FileMode.Open)", "new FileStream()", Files },
        { "new StreamReader(\"a.txt\").ReadToEnd()", "new StreamReader(\"a.txt\")", "new StreamReader()", Files },
        { "new FileInfo(\"a.txt\").Length", "new FileInfo(\"a.txt\").Length", "FileInfo.Length", Files },
        { "Path.GetTempFileName()", "Path.GetTempFileName()", "Path.GetTempFileName()", Files },
        { "db.OpenAsync()", "db.OpenAsync()", "DbConnection.OpenAsync()", Database },
        { "command.ExecuteScalar()", "command.ExecuteScalar()", "DbCommand.ExecuteScalar()", Database },
        { "idb.BeginTransaction()", "idb.BeginTransaction()", "IDbConnection.BeginTransaction()", Database },
        { "socket.Send(new byte[1])", "socket.Send(new byte[1])", "Socket.Send()", Network },
        { "new TcpClient(\"127.0.0.1\", 9)", "new TcpClient(\"127.0.0.1\", 9)", "new TcpClient()", Network },
        { "Dns.GetHostAddresses(\"localhost\")", "Dns.GetHostAddresses(\"localhost\")", "Dns.GetHostAddresses()", Network },
        { "Environment.ProcessId", "Environment.ProcessId", "Environment.ProcessId", Process },
        { "Environment.MachineName", "Environment.MachineName", "Environment.MachineName", Process },
        { "Environment.CurrentManagedThreadId", "Environment.CurrentManagedThreadId", "Environment.CurrentManagedThreadId", Process },
        { "Thread.CurrentThread.ManagedThreadId", "Thread.CurrentThread.ManagedThreadId", "Thread.ManagedThreadId", Process },
        { "System.Diagnostics.Process.GetCurrentProcess()", "System.Diagnostics.Process.GetCurrentProcess()", "Process.GetCurrentProcess()", Process },
    };

    [Theory]
    [MemberData(nameof(Reported))]
    public async Task Analyze_ExternalInputInPersistentController_ReportsPS0202(string expression, string spanText, string api, string explanation)
    {
        var source = Usings + $$"""
            [Persistent]
            public class Orders
            {
                public object M(HttpClient http, HttpMessageInvoker invoker, DbConnection db, DbCommand command, IDbConnection idb, Socket socket) => {{expression}};
            }
            """;

        var diagnostic = DiagnosticAssert.Single(await TestCompiler.AnalyzeValidProgramAsync(source), "PS0202", spanText);

        Assert.Equal(DiagnosticSeverity.Warning, diagnostic.Severity);
        Assert.Equal(
            $"'{api}' {explanation}. Where its result cannot change the reply or the state, suppress this warning.",
            diagnostic.GetMessage(System.Globalization.CultureInfo.InvariantCulture));
    }

    [Fact]
    public async Task Analyze_TypedHttpClientCalledFromEndpoint_ReportsPS0202AtTheCall()
    {
        var source = Usings + """
            public sealed class GitHubClient(HttpClient http)
            {
                public Task<string> GetUserAsync(string name) => http.GetStringAsync("/users/" + name);
            }

            [Persistent]
            public class Orders
            {
                public Task<string> M(GitHubClient github) => github.GetUserAsync("x");
            }
            """;

        var diagnostic = DiagnosticAssert.Single(await TestCompiler.AnalyzeValidProgramAsync(source), "PS0202", "github.GetUserAsync(\"x\")");

        Assert.StartsWith("'HttpClient.GetStringAsync()' via GitHubClient.GetUserAsync() calls another service", diagnostic.GetMessage(System.Globalization.CultureInfo.InvariantCulture), StringComparison.Ordinal);
    }

    [Fact]
    public async Task Analyze_TypedHttpClientInjectedByInterface_ReportsPS0202AtTheCall()
    {
        var source = Usings + """
            using Microsoft.Extensions.DependencyInjection;

            public interface IGitHubClient
            {
                Task<string> GetUserAsync(string name);
            }

            public sealed class GitHubClient(HttpClient http) : IGitHubClient
            {
                public Task<string> GetUserAsync(string name) => http.GetStringAsync("/users/" + name);
            }

            public static class Setup
            {
                public static void Register(IServiceCollection services) => services.AddHttpClient<IGitHubClient, GitHubClient>();
            }

            [Persistent]
            public class Orders
            {
                public Task<string> M(IGitHubClient github) => github.GetUserAsync("x");
            }
            """;

        var diagnostic = DiagnosticAssert.Single(await TestCompiler.AnalyzeValidProgramAsync(source), "PS0202", "github.GetUserAsync(\"x\")");

        Assert.StartsWith("'HttpClient.GetStringAsync()' via GitHubClient.GetUserAsync() calls another service", diagnostic.GetMessage(System.Globalization.CultureInfo.InvariantCulture), StringComparison.Ordinal);
    }

    public static TheoryData<string, string> NotReported => new()
    {
        {
            "a [PersistentReadOnly] method of a persistent controller (read-only requests are not replayed)",
            """
            [Persistent]
            public class Orders
            {
                [PersistentReadOnly] public string Peek() => File.ReadAllText("a.txt") + Environment.MachineName;
            }
            """
        },
        {
            "a method with the obsolete name [ReadOnly] (it still marks a read-only method)",
            """
            [Persistent]
            public class Orders
            {
                [PersistentServices.ReadOnly] public string Peek() => File.ReadAllText("a.txt") + Environment.MachineName;
            }
            """
        },
        {
            "outside persistent code",
            """
            public class Orders
            {
                public Task<string> M(HttpClient http) => http.GetStringAsync("/") ;

                public string F() => File.ReadAllText("a.txt") + Environment.ProcessId;
            }
            """
        },
        {
            "paths, file names, HttpClient configuration, processor count",
            """
            [Persistent]
            public class Orders
            {
                public object[] M(HttpClient http) =>
                [
                    Path.Combine("a", "b"), Path.GetFileName("a/b.txt"), Path.GetExtension("b.txt"), new FileInfo("a.txt").Name,
                    http.BaseAddress!, http.Timeout, http.DefaultRequestHeaders, Environment.ProcessorCount, Environment.NewLine,
                ];
            }
            """
        },
        {
            "logging",
            """
            [Persistent]
            public class Orders(ILogger<Orders> logger)
            {
                public int M()
                {
                    logger.LogInformation("placed");
                    return 1;
                }
            }
            """
        },
        {
            "a Response.OnCompleted callback (it runs once the reply reached a client, never in replay)",
            """
            [Persistent]
            public class Orders
            {
                public string M(Microsoft.AspNetCore.Http.HttpContext context)
                {
                    context.Response.OnCompleted(() => File.AppendAllTextAsync("notes.txt", "sent"));
                    context.Response.OnCompleted(_ => { File.AppendAllText("notes.txt", "sent"); return Task.CompletedTask; }, null!);
                    return "ok";
                }
            }
            """
        },
        {
            "suppressed with #pragma in persistent code",
            """
            [Persistent]
            public class Orders
            {
                public string M()
                {
            #pragma warning disable PS0202 // only logged, never part of the reply
                    var host = Environment.MachineName;
            #pragma warning restore PS0202
                    return "ok";
                }
            }
            """
        },
        {
            "suppressed with #pragma and [SuppressMessage] in a called helper",
            """
            public static class Audit
            {
                public static void Write(string line)
                {
            #pragma warning disable PS0202 // an audit trail beside the reply
                    File.AppendAllText("audit.log", line);
            #pragma warning restore PS0202
                }

                [SuppressMessage("PersistentServices", "PS0202:External input", Justification = "Diagnostics only.")]
                public static string Host() => Environment.MachineName;
            }

            [Persistent]
            public class Orders
            {
                public int M()
                {
                    Audit.Write("placed");
                    _ = Audit.Host();
                    return 1;
                }
            }
            """
        },
    };

    [Theory]
    [MemberData(nameof(NotReported))]
    public async Task Analyze_ExternalInputNotReplayedOrHarmless_ReportsNothing(string context, string code)
    {
        var diagnostics = await TestCompiler.AnalyzeValidProgramAsync(Usings + code);

        Assert.True(diagnostics.IsEmpty, $"{context}: expected no diagnostics, got:\n" + string.Join("\n", diagnostics));
    }
}
