namespace PersistentServices.Testing;

/// <summary>How <see cref="PersistentApp"/> starts a service.</summary>
public sealed class PersistentAppOptions
{
    /// <summary>
    /// The service's built entry assembly (<c>MyService.dll</c>), run as <c>dotnet MyService.dll</c> with its own
    /// <c>.runtimeconfig.json</c> and <c>.deps.json</c> beside it. Required. <see cref="PersistentApp.StartAsync{TEntryPoint}"/>
    /// sets it from the entry point's assembly.
    /// </summary>
    public string AppPath { get; set; } = "";

    /// <summary>
    /// The log directory. Default: a new temporary directory that <see cref="PersistentApp.DisposeAsync"/> deletes. The
    /// service gets it as the configuration value <c>PersistentServices:LogDirectory</c> (command line and environment),
    /// so it must read its log directory from configuration: <c>o.LogDirectory = builder.Configuration["PersistentServices:LogDirectory"] ?? "data/log"</c>.
    /// A given directory is kept.
    /// </summary>
    public string? LogDirectory { get; set; }

    /// <summary>Extra environment variables of the service process (configuration: <c>Section__Key</c>).</summary>
    public IDictionary<string, string> Environment { get; } = new Dictionary<string, string>(StringComparer.Ordinal);

    /// <summary>Extra command-line arguments, after the kit's own (<c>--urls</c>, the log directory).</summary>
    public IList<string> Arguments { get; } = [];

    /// <summary>
    /// A path that answers 200 once the service is ready (for example <c>/health/ready</c>). Default: none, and the service
    /// counts as ready when it answers <c>GET /</c> with anything but 503 (PersistentServices holds every request until
    /// the log is opened and scanned, so an answer means recovery's first part is done).
    /// </summary>
    public string? ReadinessPath { get; set; }

    /// <summary>How long a start or restart may take until the service is ready. Default 60 s.</summary>
    public TimeSpan StartTimeout { get; set; } = TimeSpan.FromSeconds(60);

    /// <summary>The timeout of each HTTP request the kit sends. Default 30 s.</summary>
    public TimeSpan RequestTimeout { get; set; } = TimeSpan.FromSeconds(30);

    internal void Validate()
    {
        if (string.IsNullOrWhiteSpace(AppPath))
        {
            throw new ArgumentException("PersistentAppOptions.AppPath is required: the service's built .dll.", nameof(AppPath));
        }

        if (!File.Exists(AppPath))
        {
            throw new ArgumentException($"PersistentAppOptions.AppPath: '{AppPath}' does not exist. Build the service first (a ProjectReference from the test project builds it).", nameof(AppPath));
        }

        var runtimeConfig = Path.ChangeExtension(AppPath, ".runtimeconfig.json");
        if (!File.Exists(runtimeConfig))
        {
            throw new ArgumentException($"PersistentAppOptions.AppPath: '{AppPath}' has no '{Path.GetFileName(runtimeConfig)}' beside it: it is not an application's entry assembly.", nameof(AppPath));
        }

        if (StartTimeout <= TimeSpan.Zero || RequestTimeout <= TimeSpan.Zero)
        {
            throw new ArgumentOutOfRangeException(nameof(StartTimeout), "PersistentAppOptions.StartTimeout and RequestTimeout must be positive.");
        }

        if (ReadinessPath is { } path && !path.StartsWith('/'))
        {
            throw new ArgumentException($"PersistentAppOptions.ReadinessPath must start with '/': '{path}'.", nameof(ReadinessPath));
        }
    }
}
