using Microsoft.Extensions.DependencyInjection;
using Orleans;
using Orleans.Serialization;
using PersistentServices.Log.Records;

namespace PersistentServices.Serialization;

/// <summary>
/// User values through Orleans.Serialization, the design card's serializer. A type that opts in with Orleans'
/// attributes (<c>[GenerateSerializer]</c>, members with <c>[Id(n)]</c>) gets its compact, version-tolerant binary
/// form, and so do primitives and strings; every other type is written as plain System.Text.Json (format JSON), so users
/// annotate nothing, and a type may gain or lose properties, or be renamed or moved, without making its logged values
/// unreadable (Orleans' own JSON codec would store the type's name). Each value records its format; both are read back.
/// </summary>
internal sealed class OrleansValueCodec : ValueCodec
{
    // Building Orleans' serializer scans assemblies (about 0.1 s): off the startup path, on a thread of its own, and
    // waited for only by the first value that needs it (a checkpoint or a shared write, after recovery's scan).
    private readonly Lazy<Serializer> _serializer = new(Create, LazyThreadSafetyMode.ExecutionAndPublication);

    public OrleansValueCodec() => _ = Task.Run(() => _serializer.Value);

    /// <summary>What this codec writes for types that opted in; others are written as <see cref="ValueFormat.Json"/>.</summary>
    public override ValueFormat Format => ValueFormat.Orleans;

    public override (byte[] Bytes, ValueFormat Format) Encode<T>(T value)
        => Choice<T>.Orleans ? (_serializer.Value.SerializeToArray(value), ValueFormat.Orleans) : (SerializeJson(value), ValueFormat.Json);

    protected override T DeserializeOwn<T>(ReadOnlySpan<byte> bytes) => _serializer.Value.Deserialize<T>(bytes)!;

    private static Serializer Create()
    {
        var services = new ServiceCollection();
        services.AddSerializer();
        return services.BuildServiceProvider().GetRequiredService<Serializer>();
    }

    private static class Choice<T>
    {
        public static readonly bool Orleans = Decide(typeof(T));

        private static bool Decide(Type type)
        {
            type = Nullable.GetUnderlyingType(type) ?? type;
            return type.IsPrimitive || type == typeof(string) || type == typeof(decimal) || type == typeof(Guid) ||
                   type.IsDefined(typeof(GenerateSerializerAttribute), inherit: false);
        }
    }
}
